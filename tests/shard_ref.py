"""Independent reader of ctrain shard files, written from docs/SHARD_FORMAT.md alone (pure Python:
struct parsing, CRC-32C and LZ4 block decoding; JPEG payloads through PIL). Used by
tests/test_packdata.sh to check packdata's output against PIL's decode of the source images.

    read_shard(path, check_crc=True) -> dict(channels, codec, classes, records=[dict(...)], raw=bytes)
    decode(shard, i) -> numpy uint8 array (H, W, C)
"""
import io
import struct

import numpy as np

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        crc = (crc >> 8) ^ t[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


def lz4_block_decode(src, raw_size):
    """LZ4 block format: sequences of (token, literals, offset, match)."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        out += src[i:i + lit]
        i += lit
        if i >= n:
            break  # last sequence has literals only
        off = src[i] | (src[i + 1] << 8)
        i += 2
        ml = token & 15
        if ml == 15:
            while True:
                b = src[i]
                i += 1
                ml += b
                if b != 255:
                    break
        ml += 4
        assert 0 < off <= len(out), "bad LZ4 offset"
        start = len(out) - off
        for k in range(ml):  # byte by byte: matches may overlap their own output
            out.append(out[start + k])
    assert len(out) == raw_size, f"LZ4 block decoded to {len(out)} bytes, expected {raw_size}"
    return bytes(out)


def read_shard(path, check_crc=True):
    raw = open(path, "rb").read()
    assert raw[:8] == b"CTSHARD\x1a", "bad magic"
    (version, hsize, nrec, ncls, chans, codec, flags, coff, csize, doff, dsize, ioff, isize, maxraw, maxh,
     maxw) = struct.unpack_from("<IIQIIIIQQQQQQQII", raw, 8)
    assert version == 1 and hsize == 128 and flags == 0
    assert ioff + isize == len(raw), "file size"
    assert isize == 32 * nrec
    stored_crc = struct.unpack_from("<I", raw, 124)[0]
    if check_crc:
        c = crc32c(raw[:124])
        c = crc32c(raw[coff:coff + csize], c)
        c = crc32c(raw[ioff:ioff + isize], c)
        assert c == stored_crc, "header crc"
    classes, p = [], coff
    for _ in range(ncls):
        (ln,) = struct.unpack_from("<I", raw, p)
        classes.append(raw[p + 4:p + 4 + ln].decode())
        p += 4 + ln
    assert p == coff + csize
    recs = []
    for i in range(nrec):
        off, st, rs, h, w, lab, crc = struct.unpack_from("<QIIIIII", raw, ioff + 32 * i)
        assert off % 64 == 0 and doff <= off and off + st <= doff + dsize
        assert rs == h * w * chans and lab < ncls
        recs.append(dict(offset=off, stored=st, raw_size=rs, h=h, w=w, label=lab, crc=crc))
    return dict(channels=chans, codec=codec, classes=classes, records=recs, raw=raw, max_raw=maxraw)


def decode(shard, i, check_crc=True):
    r = shard["records"][i]
    payload = shard["raw"][r["offset"]:r["offset"] + r["stored"]]
    if check_crc:
        assert crc32c(payload) == r["crc"], f"record {i}: payload crc"
    c = shard["channels"]
    if shard["codec"] == 0:
        data = payload
    elif shard["codec"] == 1:
        data = lz4_block_decode(payload, r["raw_size"])
    else:
        from PIL import Image
        im = Image.open(io.BytesIO(payload))
        im = im.convert("L" if c == 1 else "RGB")
        return np.asarray(im).reshape(r["h"], r["w"], c)
    return np.frombuffer(data, np.uint8).reshape(r["h"], r["w"], c)
