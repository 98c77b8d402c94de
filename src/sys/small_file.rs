//! A small file the user or a peer names (a certificate, a heartbeat note, a run's JSON), read
//! whole but never past a cap, and only when it is a regular file: `/dev/zero` would fill
//! memory and a FIFO with no writer would hang the read, or the open itself.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Certificates and keys (a system CA bundle is about 200 KB).
pub const PEM_CAP: u64 = 16 << 20;
/// A heartbeat or ready note.
pub const NOTE_CAP: u64 = 1 << 20;
/// A run's run.json, summary.json or itl.json.
pub const RUN_FILE_CAP: u64 = 256 << 20;

/// The bytes of `path`, when it is a regular file of at most `cap` bytes; an error saying
/// what it is otherwise (`NotFound` passes through as the open gave it).
pub fn read(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    // Non-blocking, so that opening a FIFO with no writer returns at once.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = match () {
            _ if kind.is_fifo() => "a FIFO",
            _ if kind.is_char_device() || kind.is_block_device() => "a device",
            _ if kind.is_dir() => "a directory",
            _ => "not a regular file",
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}, not a file llmreplay reads"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB, more than a file of this kind holds",
                cap >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_text(path: &Path, cap: u64) -> io::Result<String> {
    String::from_utf8(read(path, cap)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_big_files_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("llmreplay-small-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = read(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(err.to_string().contains("a device"), "{err}");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read(&fifo, 1024).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; 2 << 20]).unwrap();
        let err = read(&big, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("larger than 1 MiB"), "{err}");
        std::fs::write(&big, b"{}").unwrap();
        assert_eq!(read_text(&big, 1 << 20).unwrap(), "{}");
        assert_eq!(
            read(&dir.join("absent"), 1).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
