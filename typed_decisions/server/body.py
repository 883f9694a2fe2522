"""Request bodies as the hosted System One API accepts them: bounded, zstd / gzip / identity.

typesafe-sdk sends bodies of 1024 bytes or more with ``Content-Encoding: zstd`` (when zstd is
available to it); other clients may send gzip. Both are decoded here, and both are *bounded*: a
body is read at most up to the limit, and decompression stops as soon as the output passes the
limit, so a 1 KB zstd bomb that would expand to gigabytes costs at most the limit plus one block
(``BodyTooLargeError`` → 413), never the memory it asks for. Truncated or corrupt streams are
``BadBodyError`` (400); unknown encodings ``UnsupportedEncodingError`` (415).

Time is bounded too: a body must arrive within ``timeout_s`` (slow-loris clients that trickle a
byte at a time get ``RequestTimeoutError``, 408), and at most ``MAX_CODINGS`` encodings may be
stacked (``gzip, gzip, ...`` nests bombs; each layer is bounded, and so is their number).

``service.py`` calls ``read_body`` then ``decode_body``; nothing here knows about JSON or models.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

from ..errors import BadBodyError, BodyTooLargeError, RequestTimeoutError, UnsupportedEncodingError

SUPPORTED_ENCODINGS = ("zstd", "gzip", "identity")
MAX_CODINGS = 2  # e.g. "gzip, zstd"; more layers serve only bombs

# zstd input is fed in slices this small: one slice can expand to at most ~ slice/4 × 128 KiB
# (RLE blocks), which bounds the memory a bomb costs beyond the limit to a few MiB.
_ZSTD_SLICE = 256


def _too_large(limit: int) -> BodyTooLargeError:
    return BodyTooLargeError(f"the request body is larger than this server's limit of {limit} bytes "
                             "(after decompression); shorten the state, or raise --max-body-bytes")


async def read_body(chunks: AsyncIterator[bytes], limit: int, content_length: str | None = None,
                    timeout_s: float | None = None) -> bytes:
    """Read a body stream, refusing (413) as soon as it passes ``limit`` bytes, and (408) if it
    has not all arrived after ``timeout_s`` seconds."""
    if content_length is not None and content_length.strip().isdigit() and int(content_length) > limit:
        raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                parts.append(chunk)
    except TimeoutError:
        raise RequestTimeoutError(
            f"the request body did not arrive within {timeout_s:g} s (--body-timeout-s; {size} bytes "
            "came); send the whole body at once") from None
    return b"".join(parts)


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise BadBodyError(f"the gzip body is corrupt ({e}); send valid gzip or no Content-Encoding") from None
    if len(out) > limit or d.unconsumed_tail:
        raise _too_large(limit)
    if not d.eof:
        raise BadBodyError("the gzip body is truncated; send the whole stream")
    return out


def _unzstd(data: bytes, limit: int) -> bytes:
    try:
        import zstandard
    except ImportError:  # pragma: no cover - part of the [server] extra
        raise UnsupportedEncodingError("this server cannot decode zstd bodies: pip install zstandard "
                                       "(part of 'typed-decisions-runtime[server]'), or send gzip") from None
    # A legitimate frame never needs a window larger than its content (the limit) or 8 MiB.
    dctx = zstandard.ZstdDecompressor(max_window_size=max(1 << 23, 1 << (limit - 1).bit_length()))
    out = bytearray()
    pos = 0
    while pos < len(data):                     # one iteration per frame (frames may be concatenated)
        d = dctx.decompressobj()
        try:
            while not d.eof and pos < len(data):
                piece = data[pos:pos + _ZSTD_SLICE]
                out += d.decompress(piece)
                pos += len(piece)
                if len(out) > limit:
                    raise _too_large(limit)
        except zstandard.ZstdError as e:
            if "memory" in str(e) or "window" in str(e).lower():
                raise BodyTooLargeError(f"the zstd frame needs a window larger than this server "
                                        f"allows ({e}); compress with a smaller window") from None
            raise BadBodyError(f"the zstd body is corrupt ({e}); send valid zstd or no "
                               "Content-Encoding") from None
        if not d.eof:
            raise BadBodyError("the zstd body is truncated; send the whole frame")
        pos -= len(d.unused_data)
    return bytes(out)


def decode_body(data: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo ``Content-Encoding`` (applied in order, so decoded in reverse), bounded by ``limit``.

    >>> import gzip; decode_body(gzip.compress(b'{"a": 1}'), "gzip", 100)
    b'{"a": 1}'
    """
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    if len(codings) > MAX_CODINGS:
        raise UnsupportedEncodingError(f"{len(codings)} stacked Content-Encodings; at most "
                                       f"{MAX_CODINGS} are decoded (e.g. 'zstd' or 'gzip')")
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            data = _gunzip(data, limit)
        elif coding == "zstd":
            data = _unzstd(data, limit)
        else:
            raise UnsupportedEncodingError(
                f"Content-Encoding {coding!r} is not supported; send one of "
                f"{', '.join(SUPPORTED_ENCODINGS)}")
    if len(data) > limit:
        raise _too_large(limit)
    return data


__all__ = ["SUPPORTED_ENCODINGS", "decode_body", "read_body"]
