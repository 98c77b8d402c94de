//! `--tokenizer ORG/NAME[@REV]`: a model's tokenizer from the local Hugging Face cache.
//!
//! On a GPU host the served model's `tokenizer.json` and `tokenizer_config.json` already sit
//! in the cache `huggingface_hub` keeps: `HUB/models--ORG--NAME/snapshots/COMMIT/`, with
//! `refs/BRANCH` holding the commit a branch or tag stood at when it was downloaded. Nothing
//! here touches the network: a model that is not in the cache is an error that says where it
//! looked and how to fetch the two files.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A model named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// `ORG/NAME`.
    pub repo: String,
    /// A branch, tag or commit; `main` when not given.
    pub revision: String,
}

impl ModelRef {
    /// `ORG/NAME` or `ORG/NAME@REV`, each part made of the characters Hugging Face allows in
    /// repository names; None for anything else (a path).
    pub fn parse(spec: &str) -> Option<ModelRef> {
        let (repo, revision) = match spec.split_once('@') {
            Some((repo, rev)) if !rev.is_empty() => (repo, rev),
            Some(_) => return None,
            None => (spec, "main"),
        };
        let (org, name) = repo.split_once('/')?;
        let part = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (part(org) && part(name)).then(|| ModelRef {
            repo: repo.to_string(),
            revision: revision.to_string(),
        })
    }

    /// The command that puts this model's tokenizer files into the cache.
    pub fn download_hint(&self) -> String {
        let rev = match self.revision.as_str() {
            "main" => String::new(),
            r => format!(" --revision {r}"),
        };
        format!(
            "huggingface-cli download {}{rev} tokenizer.json tokenizer_config.json",
            self.repo
        )
    }
}

/// A model's snapshot found in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub model: ModelRef,
    /// The commit the revision resolved to.
    pub commit: String,
    /// `.../snapshots/COMMIT`, holding `tokenizer.json`.
    pub dir: PathBuf,
}

/// The hub cache directory, as `huggingface_hub` chooses it from the environment.
pub fn hub_cache_dir(env: impl Fn(&str) -> Option<String>) -> (PathBuf, &'static str) {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(dir) = set("HF_HUB_CACHE") {
        return (PathBuf::from(dir), "HF_HUB_CACHE");
    }
    if let Some(dir) = set("HUGGINGFACE_HUB_CACHE") {
        return (PathBuf::from(dir), "HUGGINGFACE_HUB_CACHE");
    }
    if let Some(home) = set("HF_HOME") {
        return (Path::new(&home).join("hub"), "HF_HOME/hub");
    }
    if let Some(xdg) = set("XDG_CACHE_HOME") {
        return (
            Path::new(&xdg).join("huggingface").join("hub"),
            "XDG_CACHE_HOME/huggingface/hub",
        );
    }
    let home = set("HOME").unwrap_or_else(|| "~".into());
    (
        Path::new(&home).join(".cache/huggingface/hub"),
        "~/.cache/huggingface/hub",
    )
}

/// What `--tokenizer SPEC` names: a file or directory when one exists, else a model in the
/// local Hugging Face cache when SPEC reads as `ORG/NAME[@REV]`, else SPEC itself (whose
/// loading then says it is missing).
pub fn resolve(spec: &Path) -> Result<(PathBuf, Option<Snapshot>)> {
    if spec.exists() {
        return Ok((spec.to_path_buf(), None));
    }
    let Some(model) = spec.to_str().and_then(ModelRef::parse) else {
        return Ok((spec.to_path_buf(), None));
    };
    let (hub, source) = hub_cache_dir(|k| std::env::var(k).ok());
    let snapshot = find(&hub, &model).map_err(|why| Error::Tokenizer {
        path: spec.to_path_buf(),
        message: format!(
            "not a file or directory here, and {} is not in the local Hugging Face cache: {why} \
             (looked in {}, from {source}; HF_HUB_CACHE or HF_HOME choose another). \
             llmreplay never downloads: fetch the tokenizer with `{}`, or give a path",
            model.repo,
            hub.display(),
            model.download_hint()
        ),
    })?;
    Ok((snapshot.dir.clone(), Some(snapshot)))
}

/// The snapshot of `model` under the hub cache `hub`, or why there is none.
pub fn find(hub: &Path, model: &ModelRef) -> std::result::Result<Snapshot, String> {
    let repo_dir = hub.join(format!("models--{}", model.repo.replace('/', "--")));
    if !repo_dir.is_dir() {
        return Err(format!("no {}", repo_dir.display()));
    }
    let snapshots = repo_dir.join("snapshots");
    let ref_file = repo_dir.join("refs").join(&model.revision);
    let commit = match std::fs::read_to_string(&ref_file) {
        Ok(c) => c.trim().to_string(),
        // A commit given as the revision names its snapshot directly.
        Err(_) if is_commit(&model.revision) => model.revision.clone(),
        Err(_) => {
            return Err(format!(
                "no {} (revisions there: {})",
                ref_file.display(),
                listing(&repo_dir.join("refs"), &snapshots)
            ))
        }
    };
    let dir = snapshots.join(&commit);
    if !dir.join("tokenizer.json").is_file() {
        return Err(format!(
            "no {} (revision {} is commit {commit}; snapshots holding tokenizer.json: {})",
            dir.join("tokenizer.json").display(),
            model.revision,
            listing(&repo_dir.join("refs"), &snapshots)
        ));
    }
    Ok(Snapshot {
        model: model.clone(),
        commit,
        dir,
    })
}

fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The refs and the snapshots holding a tokenizer, for an error message.
fn listing(refs: &Path, snapshots: &Path) -> String {
    let names = |dir: &Path, keep: &dyn Fn(&Path) -> bool| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| keep(&e.path()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let refs = names(refs, &|p| p.is_file());
    let snaps = names(snapshots, &|p| p.join("tokenizer.json").is_file());
    let refs = if refs.is_empty() {
        "no refs".to_string()
    } else {
        format!("refs {}", refs.join(", "))
    };
    let snaps = if snaps.is_empty() {
        "none".to_string()
    } else {
        snaps.join(", ")
    };
    format!("{refs}; snapshots with tokenizer.json: {snaps}")
}

/// An environment of the given variables only, for tests of the lookups above.
#[cfg(test)]
pub(crate) fn env(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_are_told_apart() {
        let m = ModelRef::parse("Qwen/Qwen3-8B").unwrap();
        assert_eq!(
            (m.repo.as_str(), m.revision.as_str()),
            ("Qwen/Qwen3-8B", "main")
        );
        let m = ModelRef::parse("meta-llama/Llama-3.1-8B-Instruct@v1.0").unwrap();
        assert_eq!(m.revision, "v1.0");
        assert_eq!(
            m.download_hint(),
            "huggingface-cli download meta-llama/Llama-3.1-8B-Instruct --revision v1.0 tokenizer.json tokenizer_config.json"
        );
        for path in [
            "qwen3", "a/b/c", "./x", "../x/y", "/abs/x", "a/", "a/b@", "a b/c",
        ] {
            assert_eq!(ModelRef::parse(path), None, "{path}");
        }
    }

    #[test]
    fn the_cache_directory_follows_huggingface_hub() {
        assert_eq!(
            hub_cache_dir(env(&[("HF_HUB_CACHE", "/a"), ("HF_HOME", "/b")])).0,
            PathBuf::from("/a")
        );
        assert_eq!(
            hub_cache_dir(env(&[("HF_HOME", "/b"), ("HOME", "/h")])).0,
            PathBuf::from("/b/hub")
        );
        assert_eq!(
            hub_cache_dir(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])).0,
            PathBuf::from("/x/huggingface/hub")
        );
        assert_eq!(
            hub_cache_dir(env(&[("HF_HUB_CACHE", ""), ("HOME", "/h")])).0,
            PathBuf::from("/h/.cache/huggingface/hub")
        );
    }
}
