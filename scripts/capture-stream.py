#!/usr/bin/env python3
"""Captures a server's event stream as a golden fixture with its timing.

    scripts/capture-stream.py URL BODY.json OUT.sse [--twice]

POSTs BODY to URL (http only), reads the chunked event stream, and writes each event as the
server sent it, preceded by a comment line `: at_ms=T` (ms from the send to the read that
completed the event). `llmreplay mock --replay-stream OUT.sse` sends it back at those times.
With --twice the body is sent once first and the second answer kept (its prompt then cached).
Standard library only.
"""
import json
import socket
import sys
import time
from urllib.parse import urlsplit


def exchange(url, body):
    u = urlsplit(url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    s = socket.create_connection((u.hostname, u.port or 80), timeout=120)
    sent = time.monotonic()
    s.sendall(head + payload)
    raw, times = b"", []
    while True:
        data = s.recv(65536)
        if not data:
            break
        raw += data
        times.append((time.monotonic() - sent, len(raw)))
    s.close()
    head_end = raw.index(b"\r\n\r\n") + 4
    status = raw[:head_end].split(b"\r\n")[0]
    if b" 200 " not in status:
        sys.exit(f"{url}: {status.decode()}\n{raw[head_end:head_end + 500].decode(errors='replace')}")
    chunked = b"transfer-encoding: chunked" in raw[:head_end].lower()
    # The body's bytes, each with the time its read came in.
    body_bytes, at = bytearray(), []
    pos = head_end

    def arrival(offset):
        return next(t for t, end in times if end > offset)

    while pos < len(raw):
        if chunked:
            line_end = raw.index(b"\r\n", pos)
            size = int(raw[pos:line_end].split(b";")[0], 16)
            if size == 0:
                break
            start = line_end + 2
            piece = raw[start:start + size]
            pos = start + size + 2
        else:
            start, piece = pos, raw[pos:]
            pos = len(raw)
        for i in range(len(piece)):
            at.append(arrival(start + i))
        body_bytes += piece
    events, begin = [], 0
    text = bytes(body_bytes)
    while True:
        end = text.find(b"\n\n", begin)
        if end < 0:
            break
        events.append((at[end + 1], text[begin:end + 2]))
        begin = end + 2
    return events


def main():
    args = [a for a in sys.argv[1:] if a != "--twice"]
    if len(args) != 3:
        sys.exit(__doc__)
    url, body_file, out = args
    body = json.load(open(body_file))
    if "--twice" in sys.argv:
        exchange(url, body)
    events = exchange(url, body)
    with open(out, "wb") as f:
        for t, event in events:
            f.write(f": at_ms={t * 1000:.1f}\n".encode() + event)
    print(f"{out}: {len(events)} events over {events[-1][0] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
