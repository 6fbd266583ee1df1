#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/: the small golden files of tests/data/golden and
hand-made edge cases (valid files and near misses; for fuzz_npy, .npy files laid out as numpy writes
them). Plain Python, no torch or numpy. Run from the repository root: python3 fuzz/make_seeds.py"""
import json
import math
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(ROOT, "..", "tests", "data", "golden")

PACK = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "I16": "h", "I8": "b",
        "U64": "Q", "U32": "I", "U16": "H", "U8": "B", "BOOL": "?"}


def encode(dtype, values):
    if dtype == "BF16":
        return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in values)
    return struct.pack("<%d%s" % (len(values), PACK[dtype]), *values)


def st_file(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, values) -> safetensors bytes, as the reference writes them."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, values in tensors:
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return raw_file(h, data)


def raw_file(header, data=b"", length=None):
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def vals(n, scale=0.25):
    return [((i * 37) % 17 - 8) * scale / 8 for i in range(n)]


def lstm(I=2, H=2, L=2, O=2, dtype="F32", prefix="lstm.", head="fc.", bias=True, head_bias=True, skip=()):
    t = []
    for k in range(L):
        i = I if k == 0 else H
        t.append((f"{prefix}weight_ih_l{k}", dtype, [4 * H, i], vals(4 * H * i)))
        t.append((f"{prefix}weight_hh_l{k}", dtype, [4 * H, H], vals(4 * H * H)))
        if bias:
            t.append((f"{prefix}bias_ih_l{k}", dtype, [4 * H], vals(4 * H)))
            t.append((f"{prefix}bias_hh_l{k}", dtype, [4 * H], vals(4 * H)))
    t.append((f"{head}weight", dtype, [O, H], vals(O * H)))
    if head_bias:
        t.append((f"{head}bias", dtype, [O], vals(O)))
    return [x for x in t if x[0] not in skip]


def meta(I=2, H=2, L=2, O=2, window="3", **extra):
    m = {"input_size": str(I), "hidden_size": str(H), "num_layers": str(L), "output_size": str(O),
         "bias": "True", "window": window, "lstm_prefix": "lstm.", "head_prefix": "fc."}
    m.update(extra)
    return m


def write(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def copy_golden(target, names):
    for n in names:
        shutil.copy(os.path.join(GOLDEN, n), os.path.join(ROOT, "corpus", target, n))


def safetensors_seeds():
    t = "fuzz_safetensors"
    os.makedirs(os.path.join(ROOT, "corpus", t), exist_ok=True)
    copy_golden(t, ["tiny.model.safetensors", "tiny.golden.safetensors", "multi_out.golden.safetensors",
                    "small2x128.golden.safetensors"])
    every = [(f"t_{d.lower()}", d, [2, 2], [0, 1, 1, 0]) for d in PACK] + [("t_bf16", "BF16", [3], [1.0, -2.5, 0.5])]
    write(t, "every_dtype", st_file(every, {"format": "pt", "window": "5"}))
    write(t, "empty_header", st_file([]))
    write(t, "metadata_only", st_file([], {"a": "b", "\u00e9\ud83d\ude00": "\n\u0000"}))
    write(t, "zero_sized", st_file([("empty", "F32", [0, 5], []), ("scalar", "F64", [], [math.pi]),
                                    ("e2", "U8", [3, 0, 9], [])]))
    gaps = json.dumps({"a": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
                       "b": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2], "extra": {"k": 1}, "x": [1, "a"]}}).encode()
    write(t, "gaps_trailing_unknown_field", raw_file(gaps, bytes(range(16))))
    write(t, "unpadded_escaped_keys", st_file([("k\\\"\u2028", "F32", [1], [1.5])], pad=False))
    write(t, "max_shapes", st_file([("big", "U8", [1] * 64, [7]),
                                    ("z", "F32", [0, 9223372036854775807], [])]))
    # Near misses, refused: each a different check.
    write(t, "bom", raw_file(b"\xef\xbb\xbf{}"))
    write(t, "nul_then_garbage", raw_file(b"{}\x00GARBAGE"))
    write(t, "newline_after", raw_file(b"{}\n"))
    write(t, "too_deep", raw_file(b'{"t":{"x":{"y":[1]}}}'))
    write(t, "duplicate_key", raw_file(b'{"__metadata__":{"w":"1","w":"2"}}'))
    write(t, "overlap", raw_file(json.dumps({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                             "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}).encode(),
                                 b"\0" * 8))
    write(t, "past_end", raw_file(b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', b"\0" * 8))
    write(t, "length_past_file", raw_file(b"{}", length=1 << 62))
    write(t, "shape_overflow", raw_file(
        b'{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'))


def loader_seeds():
    t = "fuzz_model_loader"
    os.makedirs(os.path.join(ROOT, "corpus", t), exist_ok=True)
    copy_golden(t, ["tiny.model.safetensors", "tiny.golden.safetensors"])
    write(t, "l2_f32_meta", st_file(lstm(), meta()))
    write(t, "l3_f16_nobias", st_file(lstm(L=3, dtype="F16", bias=False, head_bias=False),
                                      meta(L=3, bias="False")))
    write(t, "l1_bf16", st_file(lstm(L=1, I=3, H=1, O=1, dtype="BF16")))
    write(t, "l2_f64_prefixes", st_file(lstm(dtype="F64", prefix="encoder.rnn.", head="head.")))
    write(t, "bare_prefix", st_file(lstm(L=1, prefix="", head="out.")))
    write(t, "explicit_prefix_meta", st_file(lstm(prefix="a.", head="b.") + lstm(prefix="c.", head="d."),
                                             {"lstm_prefix": "a", "head_prefix": "b."}))
    write(t, "two_lstms", st_file(lstm(prefix="a.", head="b.") + lstm(prefix="c.", head="d.")))
    write(t, "proj_size", st_file(lstm() + [("lstm.weight_hr_l0", "F32", [2, 2], vals(4))]))
    write(t, "bidirectional", st_file(lstm() + [("lstm.weight_ih_l0_reverse", "F32", [8, 2], vals(16))]))
    write(t, "missing_layer", st_file(lstm(L=3, skip=("lstm.weight_ih_l1",))))
    write(t, "nan_weight", st_file([(n, d, s, v if n != "fc.weight" else [math.nan] + v[1:])
                                    for n, d, s, v in lstm()]))
    write(t, "bad_window", st_file(lstm(), meta(window="+5")))
    write(t, "too_many_layers", st_file(lstm(L=65, I=1, H=1, O=1, bias=False)))


def npy_file(header, data=b"", version=(1, 0), pad=True, length=None):
    """A .npy file as numpy writes it: magic, version, header length (2 bytes in 1.0, 4 after), the
    header dict padded with spaces and a newline so the data starts on a 64-byte boundary, the data."""
    h = header.encode("latin1")
    len_bytes = 2 if version[0] == 1 else 4
    if pad:
        h += b" " * (-(len(h) + 1 + 8 + len_bytes) % 64) + b"\n"
    n = len(h) if length is None else length
    return b"\x93NUMPY" + bytes(version) + n.to_bytes(len_bytes, "little") + h + data


def npy_seeds():
    t = "fuzz_npy"
    f4 = struct.pack("<6f", 1.5, -2.0, 0.0, 3.25, -0.0, 1e30)
    f8 = struct.pack("<4d", math.pi, -1e300, 5e-324, 2.0)
    write(t, "f4_v1", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f4))
    write(t, "f8_v2", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", f8, version=(2, 0)))
    write(t, "f4_v3_native", npy_file("{'descr': '=f4', 'fortran_order': False, 'shape': (1, 6), }", f4,
                                      version=(3, 0)))
    write(t, "empty_rows", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 7), }"))
    write(t, "spaces_double_quotes", npy_file('{ "shape" : ( 2 ,3 ) , "descr":"<f4","fortran_order":False}', f4,
                                              pad=False))
    write(t, "nan_inf", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }",
                                 struct.pack("<3f", math.nan, math.inf, -math.inf)))
    # Near misses, refused: each a different check.
    write(t, "bad_magic", b"\x93NUMPZ" + npy_file("{}")[6:])
    write(t, "version_4", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", f4[:4],
                                   version=(4, 0)))
    write(t, "length_cut", b"\x93NUMPY\x02\x00\x10")
    write(t, "header_past_end", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }",
                                         version=(2, 0), length=1 << 30))
    write(t, "four_dims", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 3, 2), }", f4))
    write(t, "fortran", npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", f4))
    write(t, "three_dims", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 2), }", f4))
    write(t, "three_dims_f8", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1, 2), }", f8))
    write(t, "three_dims_empty", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5, 3), }"))
    write(t, "big_endian", npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 2), }", f4))
    write(t, "int32", npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", f4))
    write(t, "structured", npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", f4))
    write(t, "duplicate_key", npy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                                       f4))
    write(t, "no_shape", npy_file("{'descr': '<f4', 'fortran_order': False, }", f4))
    write(t, "truncated_data", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", f8[:-3]))
    write(t, "trailing_data", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }", f8))
    write(t, "huge_shape", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                                    f8))
    write(t, "unterminated", npy_file("{'descr': '<f4, 'fortran_order': False, 'shape': (3, 2)", f4, pad=False))
    write(t, "text_after", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), } x", f4, pad=False))


def sse_seed(stream, cap=4000, chunk_seed=7, stop_after=0):
    """fuzz_sse's input: the line/event cap (2 bytes), the seed of the chunk sizes, the event after
    which the callback stops the parser (0 = never), then the stream."""
    return cap.to_bytes(2, "big") + bytes([chunk_seed, stop_after]) + stream


def sse_seeds():
    # The line-end seeds; the other fuzz_sse seeds are hand-made files in the corpus.
    t = "fuzz_sse"
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"hi you"},"finish_reason":null}]}'
    write(t, "cr_only", sse_seed(chunk + b"\r\r: comment\r\rdata: {\"a\":\rdata: 1}\r\rdata: [DONE]\r\r"))
    write(t, "cr_lf_crlf_mixed", sse_seed(chunk + b"\r\n\r" + chunk + b"\n\r\n" + chunk + b"\r\r\ndata: [DONE]\n\r"))
    # Every line end a CRLF, in 1..16-byte pieces: many a CR ends one chunk and its LF starts the next.
    write(t, "crlf_split", sse_seed((chunk + b"\r\n\r\n") * 8 + b"data: [DONE]\r\n\r\n", chunk_seed=200))
    write(t, "cr_at_eof", sse_seed(chunk + b"\r\rdata: [DONE]\r"))
    write(t, "cr_small_cap", sse_seed(b"data: " + b"x" * 40 + b"\rdata: y\r\r", cap=16))


if __name__ == "__main__":
    safetensors_seeds()
    loader_seeds()
    npy_seeds()
    sse_seeds()
