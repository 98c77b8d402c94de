//! What start-up learns of a tokenizer, kept between runs.
//!
//! Finding the boundary-stable tokens ([`SafeVocab`]) and what the server wraps around the
//! content ([`Frame`]) costs about 0.6 s for a 150k-token vocabulary (half reading the
//! tokenizer, half scanning it), and gives the same answer on every run of the same files. So
//! the answer is kept in the user's cache directory under the digest of `tokenizer.json` and
//! of the `tokenizer_config.json` whose template was measured: a later run reads a few
//! hundred kilobytes and never loads the tokenizer unless it counts (`--verify`, dataset
//! prompts, the mock's counting).
//!
//! Safe by construction: an entry is written to a temporary file and renamed into place (a
//! concurrent run reads the old entry or the new one, never half of one), carries its own
//! checksum, and is checked piece by piece as it is read; anything unreadable is a miss that
//! is analysed again and rewritten. `LLMREPLAY_CACHE_DIR` moves the cache (empty: none).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Frame, PromptCounter, SafeVocab, Wrapping};
use crate::digest::fnv1a;
use crate::error::{Error, Result};

/// Bumped whenever what is analysed or how it is written changes.
/// 2: frames measured by comparing probes (earlier entries may hold a refusal that no longer
/// stands).
const FORMAT: &str = "llmreplay-tokenizer-analysis 2";

/// The stable tokens and the frames of a tokenizer (and template).
pub struct Analysis {
    pub vocab: SafeVocab,
    /// The chat frame, when there is a template (or why it cannot be made exact).
    chat: Option<std::result::Result<Frame, String>>,
    completion: std::result::Result<Frame, String>,
    /// Where it came from, for the start-up line.
    pub source: Source,
    /// The digests of the tokenizer and template files: `TOKENIZER-CONFIG`.
    pub digest: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Read from this cache entry.
    Cached(PathBuf),
    /// Analysed now, and kept in this entry (None: no cache, or it could not be written).
    Analysed(Option<PathBuf>),
}

impl Analysis {
    /// Scans the counter's tokenizer (`file`) and measures the frames of its template.
    pub fn make(counter: &PromptCounter, file: &Path) -> Result<Analysis> {
        let tokenizer = counter.tokenizer().map_err(|message| Error::Tokenizer {
            path: file.to_path_buf(),
            message,
        })?;
        let vocab = SafeVocab::from_tokenizer(tokenizer, file)?;
        let chat = counter.template_path().map(|_| {
            counter
                .frame(Wrapping::Chat, &vocab)
                .map_err(|e| e.to_string())
        });
        let completion = counter
            .frame(Wrapping::Completion, &vocab)
            .map_err(|e| e.to_string());
        Ok(Analysis {
            vocab,
            chat,
            completion,
            source: Source::Analysed(None),
            digest: String::new(),
        })
    }

    /// The frame of `wrapping`: Ok(None) for chat requests without a template.
    pub fn frame(&self, wrapping: Wrapping) -> std::result::Result<Option<Frame>, String> {
        match wrapping {
            Wrapping::TokenIds => Ok(Some(Frame::default())),
            Wrapping::Completion => self.completion.clone().map(Some),
            Wrapping::Chat => self.chat.clone().transpose(),
        }
    }

    fn write(&self, out: &mut String) {
        let frame = |f: &std::result::Result<Frame, String>| match f {
            Ok(f) => format!("ok {} {}", f.head, f.tail),
            Err(e) => format!("err {}", e.replace('\n', " ")),
        };
        out.push_str(&format!("completion {}\n", frame(&self.completion)));
        if let Some(chat) = &self.chat {
            out.push_str(&format!("chat {}\n", frame(chat)));
        }
        out.push_str(&format!("tokens {}\n", self.vocab.len()));
        for i in 0..self.vocab.len() {
            out.push_str(&format!("{}\t{}\n", self.vocab.id(i), self.vocab.text(i)));
        }
    }

    fn read(body: &str, has_template: bool) -> Option<Analysis> {
        let mut lines = body.lines();
        let frame = |line: Option<&str>, key: &str| -> Option<std::result::Result<Frame, String>> {
            let rest = line?.strip_prefix(key)?.strip_prefix(' ')?;
            if let Some(e) = rest.strip_prefix("err ") {
                return Some(Err(e.to_string()));
            }
            let mut n = rest.strip_prefix("ok ")?.split(' ').map(str::parse::<u64>);
            let (head, tail) = (n.next()?.ok()?, n.next()?.ok()?);
            Some(Ok(Frame { head, tail }))
        };
        let completion = frame(lines.next(), "completion")?;
        let chat = match has_template {
            true => Some(frame(lines.next(), "chat")?),
            false => None,
        };
        let count: usize = lines.next()?.strip_prefix("tokens ")?.parse().ok()?;
        let mut pieces = Vec::with_capacity(count);
        for line in lines.by_ref().take(count) {
            let (id, text) = line.split_once('\t')?;
            pieces.push((id.parse::<u32>().ok()?, text));
        }
        if pieces.len() != count || lines.next().is_some() {
            return None;
        }
        Some(Analysis {
            vocab: SafeVocab::from_checked_pieces(&pieces)?,
            chat,
            completion,
            source: Source::Analysed(None),
            digest: String::new(),
        })
    }

    /// For run.json: which files were analysed and whether this run scanned them.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "digest": self.digest,
            "from_cache": matches!(self.source, Source::Cached(_)),
        })
    }
}

/// The cache directory: `LLMREPLAY_CACHE_DIR` (empty: no cache), else the XDG cache
/// directory's `llmreplay/`, else `~/.cache/llmreplay/`.
pub fn cache_dir(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(dir) = env("LLMREPLAY_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    set("XDG_CACHE_HOME")
        .map(|x| Path::new(&x).join("llmreplay"))
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".cache/llmreplay")))
}

/// The analysis of `file` (and the counter's template): from the cache when an entry for
/// these exact files is there and sound, else made now (loading the tokenizer into a new
/// counter) and stored. Returns the analysis and the counter to count with.
pub fn load_or_make(
    file: &Path,
    config: Option<&Path>,
    thinking: Option<bool>,
    dir: Option<&Path>,
) -> Result<(Analysis, PromptCounter)> {
    let counter = PromptCounter::deferred(file, config)?.with_thinking(thinking);
    let template = counter.template_path().map(Path::to_path_buf);
    let mut digest = digests(file, &counter.template_files())?;
    if let Some(on) = thinking.filter(|_| template.is_some()) {
        digest.push_str(if on { "~thinking" } else { "~no-thinking" });
    }
    let entry = dir.map(|dir| dir.join(format!("{digest}.txt")));
    if let Some(entry) = &entry {
        if let Some(mut analysis) = read_entry(entry, template.is_some()) {
            analysis.source = Source::Cached(entry.clone());
            analysis.digest = digest;
            return Ok((analysis, counter));
        }
    }
    let (tokenizer, _) = super::load_tokenizer(file)?;
    let counter = counter.with_tokenizer(tokenizer);
    let mut analysis = Analysis::make(&counter, file)?;
    let kept = entry.filter(|e| write_entry(e, &analysis).is_ok());
    analysis.source = Source::Analysed(kept);
    analysis.digest = digest;
    Ok((analysis, counter))
}

/// `TOKENIZER-CONFIG`: FNV-1a of each file's content and its length (the tokenizer's, then
/// each template file's joined by `+`: `none` without a template, `@yyyymmdd` after a template
/// that prints the date); the name of the cache entry.
fn digests(file: &Path, template: &[&Path]) -> Result<String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| Error::io(p, e));
    let digest = |bytes: &[u8]| format!("{:016x}{:x}", fnv1a(bytes), bytes.len());
    let mut config = Vec::new();
    let mut dated = false;
    for t in template {
        let bytes = read(t)?;
        dated |= String::from_utf8_lossy(&bytes).contains("strftime_now");
        config.push(digest(&bytes));
    }
    let mut config = match config.is_empty() {
        true => "none".to_string(),
        false => config.join("+"),
    };
    if dated {
        // A template that prints today's date may count differently tomorrow.
        let today = crate::sys::wall_start::utc_stamp(
            crate::sys::wall_start::unix_ns_now() / 1_000_000_000,
        );
        config.push_str(&format!("@{}", &today[..8]));
    }
    Ok(format!("{}-{config}", digest(&read(file)?)))
}

fn read_entry(entry: &Path, has_template: bool) -> Option<Analysis> {
    let text = std::fs::read_to_string(entry).ok()?;
    let body = text.strip_prefix(FORMAT)?.strip_prefix('\n')?;
    let (body, check) = body.rsplit_once("check ")?;
    if check.trim_end() != format!("{:016x}", fnv1a(body.as_bytes())) {
        return None;
    }
    Analysis::read(body, has_template)
}

fn write_entry(entry: &Path, analysis: &Analysis) -> std::io::Result<()> {
    let dir = entry.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut body = String::new();
    analysis.write(&mut body);
    let text = format!("{FORMAT}\n{body}check {:016x}\n", fnv1a(body.as_bytes()));
    // A name no concurrent writer shares; the rename replaces the entry whole.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".tmp-{}-{nanos}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, entry)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::hub::env;
    use super::*;

    #[test]
    fn the_cache_directory() {
        assert_eq!(
            cache_dir(env(&[("LLMREPLAY_CACHE_DIR", "/c"), ("HOME", "/h")])),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(
            cache_dir(env(&[("LLMREPLAY_CACHE_DIR", ""), ("HOME", "/h")])),
            None
        );
        assert_eq!(
            cache_dir(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/llmreplay"))
        );
        assert_eq!(
            cache_dir(env(&[("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/llmreplay"))
        );
    }

    #[test]
    fn entries_read_back_and_damage_is_a_miss() {
        let pieces: Vec<(u32, String)> = (0..1200u32)
            .map(|i| (i + 7, format!(" w{}", char::from(b'a' + (i % 26) as u8))))
            .collect();
        let borrowed: Vec<(u32, &str)> = pieces.iter().map(|(i, t)| (*i, t.as_str())).collect();
        let analysis = Analysis {
            vocab: SafeVocab::from_pieces(&borrowed),
            chat: Some(Err(
                "the chat template adds 3 tokens around one content".into()
            )),
            completion: Ok(Frame { head: 1, tail: 0 }),
            source: Source::Analysed(None),
            digest: String::new(),
        };
        let dir = std::env::temp_dir().join(format!("llmreplay-analysis-{}", std::process::id()));
        let entry = dir.join("e.txt");
        write_entry(&entry, &analysis).unwrap();
        let back = read_entry(&entry, true).unwrap();
        assert_eq!(back.vocab.len(), 1200);
        assert_eq!((back.vocab.id(5), back.vocab.text(5)), (12, " wf"));
        assert_eq!(
            back.frame(Wrapping::Completion),
            Ok(Some(Frame { head: 1, tail: 0 }))
        );
        assert!(back
            .frame(Wrapping::Chat)
            .unwrap_err()
            .contains("adds 3 tokens"));
        // Written without a template, read as one with: the entry is not this analysis.
        assert!(read_entry(&entry, false).is_none());

        let good = std::fs::read_to_string(&entry).unwrap();
        for damaged in [
            good.replace("12\t wf", "12\t wg"), // a changed piece: the checksum fails
            good[..good.len() / 2].to_string(), // cut short
            good.replace("tokenizer-analysis 2", "tokenizer-analysis 1"), // an older format
            String::new(),
        ] {
            std::fs::write(&entry, damaged).unwrap();
            assert!(read_entry(&entry, true).is_none());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
