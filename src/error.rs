//! Library error type. Each variant says which exit status it maps to (CONTRACT §2):
//! 1 for a usage or input error, 2 when the run could not be carried out.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad command line or a combination of options that cannot work.
    #[error("{0}")]
    Usage(String),

    /// A bad record in a trace: names the file, the 1-based line and the field.
    #[error("{file}:{line}: {message}")]
    Trace {
        file: PathBuf,
        line: u64,
        message: String,
    },

    /// A tokenizer that cannot be loaded or cannot synthesise prompts.
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },

    /// An I/O failure on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The run could not be carried out (no endpoint reachable, a thread died, ...).
    #[error("{0}")]
    Run(String),
}

impl Error {
    /// The process exit status this error maps to.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Trace { .. } | Error::Tokenizer { .. } => {
                crate::ending::USAGE_EXIT_CODE
            }
            Error::Io { .. } | Error::Run(_) => crate::ending::RUN_ERROR_EXIT_CODE,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
