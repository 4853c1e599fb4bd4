#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/, deterministically.

A handful of small inputs per target, valid ones (so libFuzzer starts past the first checks) and typical
invalid ones. The files are checked in; run this again after changing it and commit what changed. Reproducers of
fixed findings live next to the seeds as crash-*/regress-* files and are not written here.

The envelope seeds are signed with the fuzz targets' fixed key (RFC 8032's first test vector, FuzzKeys.h),
through the openssl command.
"""
import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

SEED_HEX = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
AGENT_ID = "0123456789abcdef0123456789abcdef"
LEASE_ID = "fedcba9876543210fedcba9876543210"
COORDINATOR = "https://localhost:8443"


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(folder, name), "wb") as out:
        out.write(data)


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


# ---- safetensors ---------------------------------------------------------------------------------------------

def safetensors(header, data=b""):
    text = header if isinstance(header, bytes) else compact(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    two = {"__metadata__": {"format": "pt"},
           "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "U8", "shape": [3], "data_offsets": [8, 11]}}
    write("safetensors", "valid-two-tensors", safetensors(two, struct.pack("<ff", 1.5, -2.0) + b"\x01\x02\x03"))
    write("safetensors", "valid-empty", safetensors({}))
    write("safetensors", "valid-scalar-bf16",
          safetensors({"s": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}}, b"\x80\x3f"))
    write("safetensors", "valid-escaped-name",
          safetensors(b'{"t\\u00e9\\"x":{"dtype":"I64","shape":[1,1],"data_offsets":[0,8]}}', bytes(8)))
    write("safetensors", "invalid-overlap",
          safetensors({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                       "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, bytes(3)))
    write("safetensors", "invalid-header-length", struct.pack("<Q", 1 << 40) + b"{}")
    write("safetensors", "invalid-truncated", safetensors(two)[:30])
    write("safetensors", "invalid-duplicate-key",
          safetensors(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                      b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)))


# ---- update codec and weights patches --------------------------------------------------------------------------

def tensors(metadata, entries):
    """A safetensors file from (name, dtype, shape, bytes) in order."""
    header = {"__metadata__": metadata} if metadata else {}
    data = b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return safetensors(header, data)


def zstd(data):
    """zstd-compressed bytes through the zstd command, or None where it is missing."""
    try:
        return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def update_codec_seeds():
    # For the fuzz target's fixed base: "w" F32 [300], "n" I64 [1].
    counter = ("n", "I64", [1], struct.pack("<q", 7))
    int8 = tensors({"gleaner.encoding": "int8", "gleaner.samples": "10"},
                   [("w", "I8", [300], bytes(range(0, 300 % 256)) + bytes(300 - 300 % 256)),
                    ("w#scale", "F32", [2], struct.pack("<ff", 0.01, 0.02)), counter])
    write("update_codec", "valid-int8", int8)
    topk = tensors({"gleaner.encoding": "topk"},
                   [("w#index", "I32", [3], struct.pack("<iii", 5, 10, 20)), ("w#value", "I8", [3], b"\x7f\x81\x01"),
                    ("w#scale", "F32", [1], struct.pack("<f", 0.5)), counter])
    write("update_codec", "valid-topk", topk)
    write("update_codec", "valid-fp16",
          tensors({"gleaner.encoding": "fp16"}, [("w", "F16", [300], b"\x00\x3c" * 300), counter]))
    write("update_codec", "invalid-topk-order",
          tensors({"gleaner.encoding": "topk"},
                  [("w#index", "I32", [2], struct.pack("<ii", 5, 0)), ("w#value", "I8", [2], b"\x01\x01"),
                   ("w#scale", "F32", [1], struct.pack("<f", 0.5)), counter]))
    packed = zstd(topk)
    if packed:
        write("update_codec", "valid-topk-zstd", packed)
    # A patch of the base file (8 + header + 1208 data bytes): its header, two changed words, no tail.
    head = b'{"w":{"dtype":"F32","shape":[300],"data_offsets":[0,1200]},"n":{"dtype":"I64","shape":[1],' \
           b'"data_offsets":[1200,1208]}}'
    head += b" " * (-(8 + len(head)) % 8)
    head = struct.pack("<Q", len(head)) + head
    write("update_codec", "valid-patch",
          tensors({"gleaner.patch_from": "0" * 64, "gleaner.patch_to": "1" * 64},
                  [("header", "U8", [len(head)], head), ("index", "I32", [2], struct.pack("<ii", 3, 4)),
                   ("words", "U32", [2], struct.pack("<II", 1, 2)), ("tail", "U8", [0], b"")]))


# ---- manifest and envelope -----------------------------------------------------------------------------------

def manifest(**changes):
    files = [{"role": role, "sha256": digit * 64, "size": size}
             for role, digit, size in (("model", "a", 120), ("weights", "b", 4096), ("shard", "c", 65536))]
    obj = {"format": "gleaner-manifest/1", "coordinator": COORDINATOR, "agent_id": AGENT_ID,
           "lease_id": LEASE_ID, "nonce": "00" * 16, "job": {"id": 1, "name": "fashion-mnist-cnn"},
           "subtask": {"workunit_id": 7, "epoch": 1, "shard": 3, "samples": 1200}, "base_version": 0,
           "files": files, "model": {"arch": "mlp", "input_shape": [1, 28, 28], "num_classes": 10},
           "hyperparameters": {"local_epochs": 1, "batch_size": 32, "optimizer": {"name": "adam", "lr": 0.001},
                               "seed": 42},
           "issued_ms": 1764000000000, "deadline_ms": 1764000600000}
    obj.update(changes)
    return compact(obj).encode()


def sign(message, seed_hex=None):
    der = bytes.fromhex("302e020100300506032b657004220420" + (seed_hex or SEED_HEX))
    pem = b"-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(der) + b"\n-----END PRIVATE KEY-----\n"
    with tempfile.TemporaryDirectory() as tmp:
        key, msg = os.path.join(tmp, "key.pem"), os.path.join(tmp, "msg")
        with open(key, "wb") as out:
            out.write(pem)
        with open(msg, "wb") as out:
            out.write(message)
        signature = subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", key, "-in", msg],
                                   check=True, capture_output=True).stdout
    assert len(signature) == 64
    return base64.b64encode(signature).decode()


def manifest_seeds():
    write("manifest", "valid", manifest())
    write("manifest", "valid-loopback-name", manifest(coordinator="https://127.0.0.1:8443/"))
    write("manifest", "valid-with-patches",
          manifest(weights_patches=[{"from_sha256": "d" * 64, "sha256": "e" * 64, "size": 300}],
                   upload={"encoding": "topk", "density": 0.01, "error_feedback": True, "zstd": True}))
    write("manifest", "invalid-patch-hash", manifest(weights_patches=[{"from_sha256": "D" * 64, "sha256": "e" * 64,
                                                                       "size": 300}]))
    write("manifest", "invalid-other-agent", manifest(agent_id="f" * 32))
    write("manifest", "invalid-file-order", manifest(files=[{"role": "weights", "sha256": "b" * 64, "size": 1}] * 3))
    write("manifest", "invalid-epoch", manifest(subtask={"workunit_id": 7, "epoch": 0, "shard": 3, "samples": 1}))
    write("manifest", "invalid-format", manifest(format="gleaner-manifest/2"))
    write("manifest", "invalid-array", b"[1,2,3]")


def envelope_seeds():
    good = manifest()
    signature = sign(good)
    write("envelope", "valid", compact({"manifest": good.decode(), "signature": signature}))
    write("envelope", "valid-other-lease",
          compact({"manifest": manifest(lease_id="1" * 32).decode(), "signature": sign(manifest(lease_id="1" * 32))}))
    write("envelope", "invalid-unpadded-signature",
          compact({"manifest": good.decode(), "signature": signature.rstrip("=")}))
    write("envelope", "invalid-altered-manifest",
          compact({"manifest": good.decode().replace('"epoch":1', '"epoch":2'), "signature": signature}))
    write("envelope", "invalid-no-signature", compact({"manifest": good.decode()}))


# ---- signing-key rotations -------------------------------------------------------------------------------------

# RFC 8032's second and third test keys: seed, raw public key.
SECOND = ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
          "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
THIRD = ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
         "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025")
FIRST_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"


def public_pem(raw_hex):
    der = bytes.fromhex("302a300506032b6570032100" + raw_hex)
    return "-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(der).decode() + "\n-----END PUBLIC KEY-----\n"


def fingerprint(raw_hex):
    return hashlib.sha256(bytes.fromhex(raw_hex)).hexdigest()


def rotation(signer_seed, previous_public, next_public):
    statement = compact({"format": "gleaner-key-rotation/1", "issued_ms": 1795295651026,
                         "key": public_pem(next_public), "previous_key": fingerprint(previous_public)}).encode()
    return {"statement": statement.decode(), "signature": sign(statement, signer_seed)}


def key_rotation_seeds():
    first_to_second = rotation(SEED_HEX, FIRST_PUBLIC, SECOND[1])
    second_to_third = rotation(SECOND[0], SECOND[1], THIRD[1])
    write("key_rotation", "valid-two-steps",
          compact({"target": fingerprint(THIRD[1]), "rotations": [second_to_third, first_to_second]}))
    write("key_rotation", "valid-one-step", compact({"target": fingerprint(SECOND[1]), "rotations": [first_to_second]}))
    write("key_rotation", "invalid-gap", compact({"target": fingerprint(THIRD[1]), "rotations": [second_to_third]}))
    write("key_rotation", "invalid-not-array", compact({"target": fingerprint(SECOND[1]), "rotations": first_to_second}))


# ---- job spec ------------------------------------------------------------------------------------------------

def jobspec_seeds():
    with open(os.path.join(HERE, "..", "..", "resources", "jobs", "fashion-mnist-cnn.json"), "rb") as demo:
        write("jobspec", "valid-demo-job", demo.read())
    write("jobspec", "valid-mlp-idx", compact({
        "name": "mlp", "dataset": {"format": "idx", "train_images": "a", "train_labels": "b", "test_images": "c",
                                   "test_labels": "d"},
        "limit_train": 1000, "model": {"arch": "mlp", "input_shape": [784], "num_classes": 10, "hidden": [64, 32]},
        "shards": 4, "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
        "aggregation": {"rule": "vc-asgd", "alpha": 0.5}, "target_accuracy": 1, "overlap_epochs": False,
        "seed": 9007199254740992}))
    write("jobspec", "valid-resnet-model", compact({"arch": "resnet", "input_shape": [3, 32, 32], "num_classes": 10,
                                                    "depth": 29, "width": 16}))
    write("jobspec", "valid-safetensors-dataset", compact({"format": "safetensors", "train": "t", "test": "v"}))
    write("jobspec", "valid-augmented-cnn", compact({
        "name": "cifar", "dataset": {"format": "cifar10", "dir": "d"},
        "model": {"arch": "cnn", "input_shape": [3, 32, 32], "num_classes": 10}, "shards": 8,
        "optimizer": {"name": "adam", "lr": 0.001}, "target_accuracy": 0.8, "augment": {"crop_padding": 4, "flip": True}}))
    write("jobspec", "invalid-augment-padding", compact({
        "name": "cifar", "dataset": {"format": "cifar10", "dir": "d"},
        "model": {"arch": "cnn", "input_shape": [3, 32, 32], "num_classes": 10}, "shards": 8,
        "optimizer": {"name": "adam", "lr": 0.001}, "target_accuracy": 0.8, "augment": {"crop_padding": 17}}))
    write("jobspec", "invalid-typo", compact({"name": "x", "batchsize": 3}))
    write("jobspec", "invalid-cnn-shape", compact({"arch": "cnn", "input_shape": [1, 30, 30], "num_classes": 10}))
    write("jobspec", "invalid-syntax", b'{"name": "x",')


# ---- HTTP ----------------------------------------------------------------------------------------------------

def http_seeds():
    # The first byte is the number of bytes per read, minus one.
    def req(chunk, text):
        return bytes([chunk - 1]) + text.replace("\n", "\r\n").encode()

    write("http_request", "valid-get-range", req(256,
          "GET /api/v1/files/ab12?x=1 HTTP/1.1\nHost: localhost\nRange: bytes=10-99\nIf-Range: \"v1\"\n"
          "Authorization: Bearer abc.def\n\n"))
    write("http_request", "valid-head-etag", req(7, "HEAD /f HTTP/1.1\nHost: h\nIf-None-Match: W/\"v1\", \"v2\"\n\n"))
    write("http_request", "valid-post-json", req(16,
          "POST /api/v1/lease HTTP/1.1\nHost: h\nContent-Type: application/json\nContent-Length: 13\n"
          "Expect: 100-continue\n\n{\"agent\": 1}\n"))
    write("http_request", "valid-chunked", req(5,
          "PUT /api/v1/upload HTTP/1.1\nHost: h\nTransfer-Encoding: chunked\n\n4\nWiki\n0\n\n"))
    write("http_request", "valid-http10-suffix", req(1, "GET / HTTP/1.0\nRange: bytes=-5\n\n"))
    write("http_request", "invalid-huge-length", req(64,
          "POST / HTTP/1.1\nContent-Length: 18446744073709551616\n\n"))
    write("http_request", "invalid-bad-field", req(64, "GET / HTTP/1.1\nBad Field: x\n\n"))

    for name, size, header in (("valid-first-last", 1000, b"bytes=0-99"), ("valid-suffix", 1000, b"bytes=-5"),
                               ("valid-open", 10, b"bytes=5-"), ("valid-multi", 10, b"bytes=1-2,4-5"),
                               ("invalid-reversed", 10, b"bytes=9-3"), ("invalid-past-end", 10, b"bytes=10-"),
                               ("valid-etag-list", 10, b'W/"v1", "v2"'), ("valid-zero-size", 0, b"bytes=-0")):
        write("http_range", name, struct.pack("<Q", size) + header)


# ---- control protocol ----------------------------------------------------------------------------------------

def control_seeds():
    # The first byte is the number of bytes per read, minus one (modulo 64).
    def stream(chunk, *lines, end="\n"):
        return bytes([chunk - 1]) + "".join(line + end for line in lines).encode()

    write("control", "valid-requests", stream(64, '{"id":1,"cmd":"status"}', '{"id":2,"cmd":"pause","args":{"for":60}}'))
    write("control", "valid-replies", stream(3, '{"id":1,"ok":true,"result":{"state":"idle"}}',
                                             '{"id":null,"ok":false,"error":"bad"}', '{"event":"hello","protocol":1}'))
    write("control", "valid-crlf", stream(5, '{"id":3,"cmd":"resume"}', "", end="\r\n"))
    write("control", "invalid-ids", stream(7, '{"id":1.5,"cmd":"x"}', '{"cmd":"x"}', '{"id":1,"cmd":""}',
                                           '{"id":9007199254740993,"cmd":"x"}', "[1]", "not json"))
    write("control", "invalid-long-line", stream(10, '{"id":1,"cmd":"' + "x" * 40 + '"}'))


def main():
    update_codec_seeds()
    safetensors_seeds()
    manifest_seeds()
    envelope_seeds()
    key_rotation_seeds()
    jobspec_seeds()
    http_seeds()
    control_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())
