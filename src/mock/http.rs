//! The mock's HTTP answers and log lines: whole responses written into a connection's
//! output, error bodies shaped like vLLM's, and the JSONL logs it keeps.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use mio::net::TcpStream;
use serde_json::{json, Value};

use crate::sys::sockopt;

/// `--fault-log` and `--arrival-log`: one JSON line per event, flushed at once.
pub struct JsonlLog(BufWriter<File>);

impl JsonlLog {
    pub fn create(path: &Path) -> std::io::Result<JsonlLog> {
        Ok(JsonlLog(BufWriter::new(File::create(path)?)))
    }

    /// Writes one line and flushes it, so a killed mock loses nothing.
    pub fn log(&mut self, line: &serde_json::Value) {
        let _ = writeln!(self.0, "{line}");
        let _ = self.0.flush();
    }
}

/// Makes the coming close send RST instead of FIN (SO_LINGER with a zero timeout).
pub(super) fn reset_on_close(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = sockopt::set(stream, libc::SOL_SOCKET, libc::SO_LINGER, &linger);
}

/// An error body shaped like vLLM's.
pub fn error_body(message: &str, code: u16) -> Value {
    let kind = match code {
        400 => "BadRequestError",
        404 => "NotFoundError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        _ => "InternalServerError",
    };
    json!({"object": "error", "message": message, "type": kind, "param": null, "code": code})
}

pub(super) fn respond_json_raw(out: &mut Vec<u8>, status: u16, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    write_response(out, status, "application/json", "", &bytes);
}

/// A whole response; `extra_header` is one header line without its CRLF, or empty.
pub(super) fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    content_type: &str,
    extra_header: &str,
    body: &[u8],
) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let crlf = if extra_header.is_empty() { "" } else { "\r\n" };
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n{extra_header}{crlf}content-length: {}\r\n\r\n",
        body.len()
    )
    .ok();
    out.extend_from_slice(body);
}
