#!/usr/bin/env python3
"""Writes tokenizer.json and tokenizer_config.json (with the chat template) from a GGUF file of a
byte-level BPE model (tokenizer.ggml.model = gpt2), so that llmreplay counts prompts as the
llama-server serving that GGUF does.

    pip install gguf
    scripts/gguf-tokenizer.py MODEL.gguf OUT_DIR

Pre-tokenizers known: smollm (digits one by one, then GPT-2's split). Others are refused."""
import json, sys
import gguf

PRE = {
    # llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM: each digit alone, then GPT-2's regex.
    "smollm": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
}

def field(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [int(f.parts[i][0]) for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0].item()

def main(path, out):
    r = gguf.GGUFReader(path)
    model, pre = field(r, "tokenizer.ggml.model"), field(r, "tokenizer.ggml.pre")
    if model != "gpt2" or pre not in PRE:
        sys.exit(f"{path}: tokenizer {model}/{pre} is not one this script knows (gpt2/{'|'.join(PRE)})")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    # token_type 3 (control) and 4 (user defined) are added tokens, matched before the BPE.
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, t in enumerate(tokens) if types[i] in (3, 4)]
    special = lambda key: (tokens[field(r, key)] if field(r, key) is not None else None)
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": PRE[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": special("tokenizer.ggml.unknown_token_id"),
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    if field(r, "tokenizer.ggml.add_bos_token"):
        sys.exit(f"{path}: add_bos_token is set; this script writes no BOS template")
    config = {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": False,
              "bos_token": special("tokenizer.ggml.bos_token_id"),
              "eos_token": special("tokenizer.ggml.eos_token_id"),
              "unk_token": special("tokenizer.ggml.unknown_token_id"),
              "pad_token": special("tokenizer.ggml.padding_token_id"),
              "chat_template": field(r, "tokenizer.chat_template")}
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(f"{out}/tokenizer_config.json", "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    print(f"{out}: {len(tokens)} tokens, {len(merges)} merges, {len(added)} added")

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
