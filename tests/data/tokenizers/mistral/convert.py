"""Converts Mistral's SentencePiece model (mistral-common's tokenizer.model.v1, the tokenizer of
Mistral 7B v0.1 / Mixtral 8x7B) to a Hugging Face tokenizer.json in the non-legacy layout
(Metaspace pre-tokenizer, prepend_scheme "first"), and checks it against sentencepiece."""
import json, sys, random
import sentencepiece as spm
from transformers.convert_slow_tokenizer import import_protobuf, generate_merges
from tokenizers import Tokenizer, AddedToken, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

src, out = sys.argv[1], sys.argv[2]
pb = import_protobuf().ModelProto()
pb.ParseFromString(open(src, "rb").read())
assert pb.trainer_spec.model_type == 2, "BPE model expected"
pieces = [(p.piece, p.score) for p in pb.pieces]
vocab = {w: i for i, (w, _) in enumerate(pieces)}
merges = generate_merges(vocab, pieces)
tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1)])
tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
tok.save(out)

sp = spm.SentencePieceProcessor(model_file=src)
rng = random.Random(0)
words = [p for p, _ in pieces[3:]]
samples = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "naïve café 東京 😀 tabs\tand\nnewlines", "  two leading spaces", "x"]
for _ in range(2000):
    samples.append("".join(rng.choice(words) for _ in range(rng.randint(1, 40))).replace("▁", " ").lstrip())
bad = 0
for s in samples:
    a = sp.encode(s); b = Tokenizer.from_file(out).encode(s, add_special_tokens=False).ids if False else tok.encode(s, add_special_tokens=False).ids
    if a != b:
        bad += 1
        if bad < 5: print("DIFF", repr(s[:80]), a[:10], b[:10])
print(f"vocab {tok.get_vocab_size()}, merges {len(merges)}, {len(samples)} samples, {bad} differ from sentencepiece")
print(tok.encode("Hello world!").ids)
