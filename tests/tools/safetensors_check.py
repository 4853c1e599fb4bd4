#!/usr/bin/env python3
"""An independent safetensors reader and writer, used by tests/format/TestSafeTensors.cpp so that Gleaner's
C++ implementation is checked against a second one written from the format's specification alone
(https://github.com/huggingface/safetensors) with Python's standard library: no numpy, no torch, no Qt.

Check a file:
    safetensors_check.py FILE EXPECTED.json [--gleaner]
Write a file that Gleaner's reader must accept:
    safetensors_check.py --write OUT EXPECTED.json

EXPECTED.json is {"tensors": [{"name", "dtype", "shape", "values"}, ...], "metadata": {"key": "value"}}.
"values" lists every element in row-major order, each as a string ("1.5", "-0.0", "nan", "inf",
"18446744073709551615", "true") so that 64-bit integers and non-finite floats survive JSON; JSON numbers and
booleans are accepted too. Values are compared exactly (NaN equals NaN, and -0.0 differs from 0.0).

The reader enforces what the reference implementation enforces: the 100 MB header limit, a UTF-8 JSON object
that starts with '{', known dtypes, non-negative integer shapes and offsets, byte sizes that match the shape,
and offsets that, sorted, tile the data buffer exactly (no overlap, no hole, no trailing byte). Alignment is
not part of the format; --gleaner also checks the promises of Gleaner's writer: the data buffer starts at a
multiple of 8, every tensor is aligned for its type, the header lists the tensors in EXPECTED's order, and
"__metadata__" is absent when there is none.

Exit status: 0 when the file matches, 1 when it does not (the reason goes to stderr), 2 for a usage error.
"""

import json
import math
import struct
import sys

MAX_HEADER = 100_000_000

# dtype -> (bytes per element, struct code or None for the types decoded by hand)
DTYPES = {
    "BOOL": (1, None),
    "U8": (1, "B"),
    "I8": (1, "b"),
    "I16": (2, "h"),
    "U16": (2, "H"),
    "F16": (2, "e"),
    "BF16": (2, None),
    "I32": (4, "i"),
    "U32": (4, "I"),
    "F32": (4, "f"),
    "F64": (8, "d"),
    "I64": (8, "q"),
    "U64": (8, "Q"),
}
FLOATING = {"F16", "BF16", "F32", "F64"}


class Mismatch(Exception):
    pass


def reject_duplicates(pairs):
    seen = {}  # dicts keep insertion order, so the header's order survives
    for key, value in pairs:
        if key in seen:
            raise Mismatch(f"header lists {key!r} twice")
        seen[key] = value
    return seen


def reject_float(text):
    raise Mismatch(f"header holds the non-integer number {text}")


def reject_constant(text):
    raise Mismatch(f"header holds {text}, which is not JSON")


def is_count(value):
    return type(value) is int and value >= 0  # bool is an int subclass and is not a count


def decode_values(dtype, raw):
    size, code = DTYPES[dtype]
    count = len(raw) // size
    if dtype == "BOOL":
        for byte in raw:
            if byte not in (0, 1):
                raise Mismatch(f"BOOL byte {byte} is neither 0 nor 1")
        return [byte == 1 for byte in raw]
    if dtype == "BF16":
        halves = struct.unpack(f"<{count}H", raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack(f"<{count}{code}", raw))


def expected_value(dtype, value):
    if dtype == "BOOL":
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise Mismatch(f"expected BOOL value {value!r} is not true/false")
    if dtype in FLOATING:
        return float(value)
    return int(value)


def same_value(dtype, got, want):
    if dtype in FLOATING:
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    return got == want and type(got) is type(want)


def read_file(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise Mismatch(f"file is {len(data)} bytes, shorter than the length field")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise Mismatch(f"header length {n} is over the limit")
    if 8 + n > len(data):
        raise Mismatch(f"header length {n} runs past the end of the file")
    raw_header = data[8 : 8 + n]
    try:
        text = raw_header.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Mismatch(f"header is not UTF-8: {error}")
    if not text.startswith("{"):
        raise Mismatch("header does not start with '{'")
    try:
        header = json.loads(text, object_pairs_hook=reject_duplicates, parse_float=reject_float,
                            parse_constant=reject_constant)
    except json.JSONDecodeError as error:
        raise Mismatch(f"header is not JSON: {error}")
    if not isinstance(header, dict):
        raise Mismatch("header is not a JSON object")
    return data, n, raw_header, header


def validate(data, n, header):
    buffer = data[8 + n :]
    tensors = {}
    order = []
    metadata = None
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict):
                raise Mismatch("__metadata__ is not an object")
            metadata = info
            for key, value in metadata.items():
                if not isinstance(value, str):
                    raise Mismatch(f"__metadata__ value of {key!r} is not a string")
            continue
        if not isinstance(info, dict):
            raise Mismatch(f"{name!r}: entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise Mismatch(f"{name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(is_count(d) for d in shape):
            raise Mismatch(f"{name!r}: bad shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_count(o) for o in offsets):
            raise Mismatch(f"{name!r}: bad data_offsets {offsets!r}")
        begin, end = offsets
        if begin > end or end > len(buffer):
            raise Mismatch(f"{name!r}: data_offsets {offsets} are outside the {len(buffer)}-byte buffer")
        count = math.prod(shape)
        if count * DTYPES[dtype][0] != end - begin:
            raise Mismatch(f"{name!r}: shape {shape} of {dtype} does not fill data_offsets {offsets}")
        tensors[name] = (dtype, shape, begin, end)
        order.append(name)
    position = 0
    for name, (dtype, shape, begin, end) in sorted(tensors.items(), key=lambda item: item[1][2:]):
        if begin != position:
            raise Mismatch(f"{name!r}: starts at {begin}, not at {position} (overlap or hole)")
        position = end
    if position != len(buffer):
        raise Mismatch(f"tensors cover {position} bytes of a {len(buffer)}-byte buffer")
    return buffer, tensors, order, metadata


def check(path, expected_path, gleaner):
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    data, n, raw_header, header = read_file(path)
    buffer, tensors, order, metadata = validate(data, n, header)

    want_names = [t["name"] for t in expected["tensors"]]
    if sorted(want_names) != sorted(tensors):
        raise Mismatch(f"file holds tensors {sorted(tensors)}, expected {sorted(want_names)}")
    want_metadata = expected.get("metadata", {})
    if (metadata or {}) != want_metadata:
        raise Mismatch(f"metadata {metadata!r} differs from the expected {want_metadata!r}")
    for want in expected["tensors"]:
        name = want["name"]
        dtype, shape, begin, end = tensors[name]
        if dtype != want["dtype"] or shape != want["shape"]:
            raise Mismatch(f"{name!r}: {dtype} {shape}, expected {want['dtype']} {want['shape']}")
        got = decode_values(dtype, buffer[begin:end])
        values = [expected_value(dtype, v) for v in want["values"]]
        if len(got) != len(values):
            raise Mismatch(f"{name!r}: {len(got)} values, expected {len(values)}")
        for index, (g, w) in enumerate(zip(got, values)):
            if not same_value(dtype, g, w):
                raise Mismatch(f"{name!r}: value {index} is {g!r}, expected {w!r}")

    if gleaner:
        if (8 + n) % 8 != 0:
            raise Mismatch(f"data buffer starts at {8 + n}, not at a multiple of 8")
        if not raw_header.rstrip(b" ").endswith(b"}"):
            raise Mismatch("the header is padded with something other than spaces")
        for name, (dtype, shape, begin, end) in tensors.items():
            if begin % DTYPES[dtype][0] != 0:
                raise Mismatch(f"{name!r}: offset {begin} is not aligned for {dtype}")
        if order != want_names:
            raise Mismatch(f"header lists tensors as {order}, expected {want_names}")
        if metadata is not None and not metadata:
            raise Mismatch("header holds an empty __metadata__")
    return len(tensors)


def text_of(dtype, value):
    if dtype == "BOOL":
        return "true" if value else "false"
    return repr(float(value)) if dtype in FLOATING else str(value)


def encode(dtype, values):
    size, code = DTYPES[dtype]
    if dtype == "BOOL":
        return bytes(1 if v else 0 for v in values)
    if dtype == "BF16":
        # Only values that BF16 holds exactly are used, so truncating the F32 bits is exact.
        return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in values)
    return struct.pack(f"<{len(values)}{code}", *values)


def write(out_path, expected_path):
    inf, nan = float("inf"), float("nan")
    # Deliberately unlike Gleaner's writer: ASCII-escaped names, spaced JSON, metadata last, data in the
    # reverse of header order with a 3-byte tensor first so that later tensors are unaligned, and a header
    # padded with spaces to no particular boundary.
    samples = [
        ("flags", "BOOL", [2, 2], [True, False, False, True]),
        ("pixels", "U8", [3], [0, 200, 255]),
        ("deltas", "I8", [4], [-128, -1, 0, 127]),
        ("short", "I16", [2], [-32768, 32767]),
        ("ushort", "U16", [3], [0, 1, 65535]),
        ("half", "F16", [4], [1.5, -2.0, 65504.0, -0.0]),
        ("brain", "BF16", [3], [1.5, -inf, 2.0 ** -20]),
        ("int32", "I32", [2], [-(2 ** 31), 2 ** 31 - 1]),
        ("uint32", "U32", [2], [0, 2 ** 32 - 1]),
        ("layer.0/weight \u00fc\"\\ \U0001F600", "F32", [2, 3],
         [0.5, -1.25, 2.0 ** 127, 2.0 ** -149, nan, inf]),
        ("double", "F64", [2], [0.1, -5e-324]),
        ("labels", "I64", [3], [-(2 ** 63), 2 ** 63 - 1, 7]),
        ("counters", "U64", [2], [2 ** 64 - 1, 0]),
        ("scalar", "F32", [], [3.25]),
        ("empty", "F32", [0, 3], []),
    ]
    metadata = {"format": "pt", "note": "written by safetensors_check.py \u00e9 \"quoted\"\n"}
    blobs = {name: encode(dtype, values) for name, dtype, _, values in samples}
    for name, dtype, _, values in samples:  # every sample must be exact in its type, or EXPECTED would lie
        back = decode_values(dtype, blobs[name])
        if not all(same_value(dtype, g, w) for g, w in zip(back, values)):
            raise SystemExit(f"sample {name!r} is not exact in {dtype}")
    header = {}
    position = 0
    offsets = {}
    for name, _, _, _ in reversed(samples):
        offsets[name] = (position, position + len(blobs[name]))
        position += len(blobs[name])
    for name, dtype, shape, _ in samples:
        header[name] = {"data_offsets": list(offsets[name]), "shape": shape, "dtype": dtype}
    header["__metadata__"] = metadata
    text = json.dumps(header, ensure_ascii=True).encode("ascii") + b"   "
    with open(out_path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, _, _, _ in reversed(samples):
            f.write(blobs[name])
    expected = {
        "tensors": [
            {"name": name, "dtype": dtype, "shape": shape, "values": [text_of(dtype, v) for v in values]}
            for name, dtype, shape, values in samples
        ],
        "metadata": metadata,
    }
    with open(expected_path, "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)


def main(argv):
    args = argv[1:]
    if len(args) == 3 and args[0] == "--write":
        write(args[1], args[2])
        return 0
    gleaner = "--gleaner" in args
    args = [a for a in args if a != "--gleaner"]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        count = check(args[0], args[1], gleaner)
    except Mismatch as error:
        sys.stderr.write(f"safetensors_check: {args[0]}: {error}\n")
        return 1
    print(f"safetensors_check: {args[0]}: ok, {count} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
