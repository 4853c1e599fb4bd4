#!/usr/bin/env python3
"""An independent client of the Gleaner coordinator, written from docs/protocol.md alone.

Standard library only. It is both a small client library (safetensors reader and writer, an HTTPS client that
pins the coordinator's certificate, manifest verification with the openssl command-line tool, a raw PUT with
`Expect: 100-continue`) and an end-to-end check, run as

    python3 tests/tools/protocol_client.py --coordinator PATH/gleaner-coordinator --workdir DIR

It initialises a fresh data directory under DIR, serves it, submits a tiny job, plays two agents against it and
checks the answers the protocol document promises. One line per check ("ok: ..." / "FAIL: ..."), then
"N passed, M failed"; the exit status is 0 only when nothing failed.
"""

import argparse
import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from array import array

# --------------------------------------------------------------------------------------------------------------
# safetensors (protocol.md section 8.3)

DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4,
               "F32": 4, "F64": 8, "I64": 8, "U64": 8}
ARRAY_CODES = {"U8": "B", "I8": "b", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "F32": "f", "F64": "d",
               "I64": "q", "U64": "Q"}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


class SafetensorsError(ValueError):
    pass


def element_count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def to_bytes(dtype, values):
    """Little-endian bytes of `values` (an iterable of numbers) as `dtype`."""
    arr = array(ARRAY_CODES[dtype], values)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def from_bytes(dtype, raw):
    """An array.array of the little-endian values in `raw`."""
    arr = array(ARRAY_CODES[dtype])
    arr.frombytes(raw)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr


def st_write(tensors, metadata=None, total_size=None):
    """Serialises tensors, a list of (name, dtype, shape, raw little-endian bytes), as a safetensors file.

    The header is compact JSON padded with spaces so that the data starts at a multiple of 8, or, with
    `total_size`, padded so that the whole file has exactly that many bytes."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if total_size is None:
        text += b" " * ((-(8 + len(text))) % 8)
    else:
        want = total_size - 8 - offset
        if want < len(text):
            raise SafetensorsError("total_size too small for the header")
        text += b" " * (want - len(text))
    return struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, _, raw in tensors)


class Safetensors:
    def __init__(self, metadata, tensors, header_length):
        self.metadata = metadata  # dict str -> str
        self.tensors = tensors  # dict name -> (dtype, shape, raw bytes)
        self.header_length = header_length

    def names(self):
        return sorted(self.tensors)

    def signature(self):
        """{name: (dtype, shape)}"""
        return {n: (d, tuple(s)) for n, (d, s, _) in self.tensors.items()}

    def values(self, name):
        dtype, _, raw = self.tensors[name]
        return from_bytes(dtype, raw)

    def data_length(self):
        return sum(len(raw) for _, _, raw in self.tensors.values())


def _no_duplicate_keys(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise SafetensorsError("key %r appears twice in the header" % k)
        obj[k] = v
    return obj


def st_read(blob):
    """Parses and checks a safetensors file with the rules of protocol.md section 8.3."""
    if len(blob) < 8:
        raise SafetensorsError("shorter than 8 bytes")
    (n,) = struct.unpack_from("<Q", blob, 0)
    if n > 100_000_000 or 8 + n > len(blob):
        raise SafetensorsError("header length %d out of range" % n)
    try:
        text = blob[8:8 + n].decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError("header is not UTF-8: %s" % e)
    if not text.startswith("{"):
        raise SafetensorsError("header does not start with {")
    header = json.loads(text.rstrip(" "), object_pairs_hook=_no_duplicate_keys)
    if not isinstance(header, dict):
        raise SafetensorsError("header is not an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError("__metadata__ must map strings to strings")
    data = blob[8 + n:]
    ranges = []
    tensors = {}
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise SafetensorsError("tensor %r: entry is not an object" % name)
        dtype, shape, offs = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPE_SIZES:
            raise SafetensorsError("tensor %r: unknown dtype %r" % (name, dtype))
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise SafetensorsError("tensor %r: bad shape" % name)
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            raise SafetensorsError("tensor %r: bad data_offsets" % name)
        begin, end = offs
        if not 0 <= begin <= end <= len(data):
            raise SafetensorsError("tensor %r: data_offsets outside the data" % name)
        if end - begin != element_count(shape) * DTYPE_SIZES[dtype]:
            raise SafetensorsError("tensor %r: byte size does not match shape and dtype" % name)
        ranges.append((begin, end, name))
        tensors[name] = (dtype, shape, bytes(data[begin:end]))
    pos = 0
    for begin, end, name in sorted(ranges):
        if begin != pos:
            raise SafetensorsError("tensor %r: hole or overlap at byte %d" % (name, begin))
        pos = end
    if pos != len(data):
        raise SafetensorsError("%d trailing bytes after the last tensor" % (len(data) - pos))
    return Safetensors(metadata, tensors, n)


# --------------------------------------------------------------------------------------------------------------
# HTTPS (protocol.md sections 2 and 3)

class Response:
    def __init__(self, status, headers, body, got_continue=False):
        self.status = status
        self.headers = headers  # dict, lowercase names
        self.body = body
        self.got_continue = got_continue

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def __repr__(self):
        text = self.body[:300]
        return "HTTP %s %r" % (self.status, text)


class _Buffered:
    """A minimal reader over a (TLS) socket for the raw requests."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _more(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by the server")
        self.buf += chunk

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise ConnectionError("response head too long")
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("iso-8859-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    def read_exact(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


class Client:
    """HTTPS client that pins the coordinator's certificate (cafile) and checks the host name."""

    def __init__(self, host, port, cafile, timeout=10.0):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.ctx = ssl.create_default_context(cafile=cafile)
        assert self.ctx.check_hostname and self.ctx.verify_mode == ssl.CERT_REQUIRED

    def request(self, method, path, token=None, body=None, json_body=None, headers=None):
        """One request on a fresh connection (several answers close the connection; see protocol.md 2.2)."""
        hdrs = dict(headers or {})
        if token is not None:
            hdrs["Authorization"] = "Bearer " + token
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            hdrs.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def raw_put(self, path, body, token=None, expect_continue=True, content_length=None, wait_continue=3.0):
        """PUT with Content-Length and (optionally) Expect: 100-continue, written by hand because http.client
        cannot wait for the interim answer. When the server answers finally before `100 Continue`, the body is
        not sent. Returns a Response whose got_continue tells whether `100 Continue` came."""
        if content_length is None:
            content_length = len(body)
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            tls = self.ctx.wrap_socket(sock, server_hostname=self.host)
            head = ["PUT %s HTTP/1.1" % path, "Host: %s:%d" % (self.host, self.port),
                    "Content-Type: application/octet-stream", "Content-Length: %d" % content_length]
            if token is not None:
                head.append("Authorization: Bearer " + token)
            if expect_continue:
                head.append("Expect: 100-continue")
            tls.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii"))
            reader = _Buffered(tls)
            got_continue = False
            if expect_continue:
                tls.settimeout(wait_continue)
                try:
                    status, headers = reader.read_head()
                except socket.timeout:
                    status = None  # no interim answer: send the body anyway (RFC 9110 10.1.1)
                tls.settimeout(self.timeout)
                if status == 100:
                    got_continue = True
                elif status is not None:
                    length = int(headers.get("content-length", "0"))
                    return Response(status, headers, reader.read_exact(length), False)
            try:
                tls.sendall(body)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # the server may have answered and closed; read what it said
            status, headers = reader.read_head()
            while status == 100:  # tolerate a late interim answer
                got_continue = True
                status, headers = reader.read_head()
            length = int(headers.get("content-length", "0"))
            return Response(status, headers, reader.read_exact(length), got_continue)
        finally:
            sock.close()


# --------------------------------------------------------------------------------------------------------------
# Manifests (protocol.md section 7)

STRICT_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


class ManifestError(ValueError):
    pass


def verify_manifest(task, pubkey_pem_path, workdir):
    """Steps 1-4 of protocol.md 7.5: strict base64, Ed25519 check with `openssl pkeyutl` over the exact bytes,
    and only then the JSON parse. Returns the manifest object."""
    manifest_text, signature_text = task.get("manifest"), task.get("signature")
    if not isinstance(manifest_text, str) or not isinstance(signature_text, str):
        raise ManifestError("manifest and signature must be JSON strings")
    if not STRICT_B64.match(signature_text) or len(signature_text) % 4:
        raise ManifestError("signature is not strict base64")
    signature = base64.b64decode(signature_text, validate=True)
    if len(signature) != 64 or base64.b64encode(signature).decode("ascii") != signature_text:
        raise ManifestError("signature does not decode to 64 bytes in canonical base64")
    message = manifest_text.encode("utf-8")
    if not openssl_verify(pubkey_pem_path, message, signature, workdir):
        raise ManifestError("Ed25519 signature does not verify")
    manifest = json.loads(message)  # parsed only now
    if not isinstance(manifest, dict) or manifest.get("format") != "gleaner-manifest/1":
        raise ManifestError("not a gleaner-manifest/1 object")
    return manifest


def openssl_verify(pubkey_pem_path, message, signature, workdir):
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        msg_path = os.path.join(tmp, "manifest.json")
        sig_path = os.path.join(tmp, "sig.bin")
        with open(msg_path, "wb") as f:
            f.write(message)
        with open(sig_path, "wb") as f:
            f.write(signature)
        proc = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pubkey_pem_path, "-rawin",
                               "-in", msg_path, "-sigfile", sig_path],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
        return proc.returncode == 0 and b"Signature Verified Successfully" in proc.stdout


# --------------------------------------------------------------------------------------------------------------
# The end-to-end check

class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok: " + what, flush=True)
        else:
            self.failed += 1
            print("FAIL: " + what + ((" -- " + str(detail)) if detail != "" else ""), flush=True)
        return cond

    def require(self, cond, what, detail=""):
        if not self.check(cond, what, detail):
            raise Abort(what)


class Abort(Exception):
    pass


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def close_f32(got, want):
    """Equal within float32 rounding of a two-term blend (a few ulps)."""
    return abs(got - want) <= 4 * 2 ** -23 * max(abs(want), abs(got), 2 ** -20)


class Server:
    def __init__(self, binary, data_dir, logdir):
        self.binary = binary
        self.data_dir = data_dir
        self.logdir = logdir
        self.proc = None
        self.port = None
        self.runs = 0

    def start(self, timeout=20.0):
        self.runs += 1
        out_path = os.path.join(self.logdir, "serve-%d.stdout" % self.runs)
        err_path = os.path.join(self.logdir, "serve-%d.stderr" % self.runs)
        self.out = open(out_path, "wb")
        self.err = open(err_path, "wb")
        self.proc = subprocess.Popen([self.binary, "serve", "--data-dir", self.data_dir],
                                     stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err)
        # Learning the port when 0 is configured: protocol.md does not say. `serve` prints "port N" on stdout and
        # writes DATA_DIR/server.json {"host", "pid", "port"} (found by running it). Prefer stdout, then a
        # server.json whose pid is this process.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("serve exited with %s; see %s" % (self.proc.returncode, err_path))
            with open(out_path, "rb") as f:
                m = re.search(rb"^port (\d+)\s*$", f.read(), re.M)
            if m:
                self.port = int(m.group(1))
                return self.port
            try:
                with open(os.path.join(self.data_dir, "server.json")) as f:
                    info = json.load(f)
                if info.get("pid") == self.proc.pid and info.get("port"):
                    self.port = int(info["port"])
                    return self.port
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("serve did not announce its port within %.0f s" % timeout)

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for f in (getattr(self, "out", None), getattr(self, "err", None)):
            if f is not None:
                f.close()


def make_dataset(path, n, seed):
    """x U8 [n,1,8,8], y I64 [n], 4 balanced classes with a class-dependent pattern."""
    xs = bytearray()
    ys = []
    state = seed
    for i in range(n):
        label = i % 4
        ys.append(label)
        for p in range(64):
            state = (state * 1103515245 + 12345) & 0x7FFFFFFF
            noise = state >> 24  # 0..127
            row, col = divmod(p, 8)
            bright = (label == 0 and row < 4) or (label == 1 and row >= 4) or (label == 2 and col < 4) or \
                     (label == 3 and col >= 4)
            xs.append(min(255, noise + (128 if bright else 0)))
    blob = st_write([("x", "U8", [n, 1, 8, 8], bytes(xs)), ("y", "I64", [n], to_bytes("I64", ys))],
                    metadata={"source": "protocol_client.py"})
    with open(path, "wb") as f:
        f.write(blob)
    return blob


def result_file(weights, manifest, delta, samples, overrides=None, total_size=None, metadata=None, base_version=None):
    """A result for the lease of manifest with the weights' tensors, every float value moved by delta, as a local epoch
    would move it a little (section 12.2: far moves are refused); overrides: name -> (dtype, shape, raw). It carries
    the manifest's base_version (unless base_version says otherwise) and nonce."""
    if base_version is None:
        base_version = manifest["base_version"]
    tensors = []
    for name in weights.names():
        dtype, shape, raw = weights.tensors[name]
        if overrides and name in overrides:
            dtype, shape, raw = overrides[name]
        elif dtype == "F32":
            raw = to_bytes("F32", [f32(v + delta) for v in weights.values(name)])
        tensors.append((name, dtype, shape, raw))
    meta = {"gleaner.base_version": str(base_version), "gleaner.samples": str(samples),
            "gleaner.nonce": manifest["nonce"], "gleaner.loss": "0.6931", "gleaner.train_seconds": "0.25"}
    if metadata is not None:
        meta = metadata
    return st_write(tensors, metadata=meta, total_size=total_size)


def run(args):
    c = Checks()
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    for entry in os.listdir(workdir):
        p = os.path.join(workdir, entry)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)
    data_dir = os.path.join(workdir, "data")
    t0 = time.monotonic()
    server = Server(os.path.abspath(args.coordinator), data_dir, workdir)
    try:
        try:
            steps(c, args, workdir, data_dir, server)
        except Abort:
            pass
        except Exception as e:  # an unexpected failure is a failed check, not a crash
            c.check(False, "unexpected error", "%s: %s" % (type(e).__name__, e))
    finally:
        server.kill()
    c.check(time.monotonic() - t0 < 60, "whole run within 60 s", "%.1f s" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (c.passed, c.failed), flush=True)
    return 0 if c.failed == 0 else 1


def steps(c, args, workdir, data_dir, server):
    binary = os.path.abspath(args.coordinator)

    # --- init ---------------------------------------------------------------------------------------------------
    proc = subprocess.run([binary, "init", "--data-dir", data_dir, "--listen", "127.0.0.1:0", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    c.require(proc.returncode == 0, "init exits 0", proc.stderr.decode(errors="replace")[-500:])
    init = json.loads(proc.stdout)
    admin = init.get("admin_token", "")
    cafile = init.get("ca_certificate", "")
    pubkey_pem = init.get("signing_public_key", "")
    c.require(re.fullmatch(r"gla_[A-Za-z0-9_-]{43}", admin) is not None, "init --json gives a gla_ admin token")
    c.require(os.path.isfile(cafile), "init --json names the CA certificate file", cafile)
    c.require(pubkey_pem.startswith("-----BEGIN PUBLIC KEY-----\n") and pubkey_pem.endswith("-----END PUBLIC KEY-----\n"),
              "init --json gives the signing public key as PEM")
    pubkey_path = os.path.join(workdir, "pinned-signing-key.pub.pem")
    with open(pubkey_path, "w") as f:
        f.write(pubkey_pem)
    der = base64.b64decode("".join(pubkey_pem.strip().splitlines()[1:-1]))
    c.check(len(der) == 44 and der[:12].hex() == "302a300506032b6570032100",
            "signing key is an Ed25519 SubjectPublicKeyInfo (DER prefix 302a300506032b6570032100)")
    with open(os.path.join(data_dir, "admin-token")) as f:
        c.check(f.read().strip() == admin, "DATA_DIR/admin-token holds the admin token")
    c.check(os.stat(os.path.join(data_dir, "admin-token")).st_mode & 0o077 == 0, "admin-token has mode 0600")

    # --- serve --------------------------------------------------------------------------------------------------
    port = server.start()
    c.check(0 < port < 65536, "serve announced its port (%d)" % port)
    cl = Client("127.0.0.1", port, cafile)

    r = cl.request("GET", "/api/v1/info")
    c.require(r.status == 200, "GET /api/v1/info answers 200", r)
    info = r.json()
    c.check(info.get("protocol") == 1 and info.get("name") == "gleaner-coordinator", "info: protocol 1, name")
    c.check(info.get("signing_public_key") == pubkey_pem, "info: signing key equals init's")
    c.check(info.get("open_enrollment") is False, "info: open_enrollment false")
    c.check(r.header("server") == "gleaner-coordinator" and r.header("content-type", "").startswith("application/json"),
            "info: Server and Content-Type headers")

    # TLS: the pinned certificate holds 127.0.0.1 and localhost; a context without it must refuse the server.
    try:
        plain = ssl.create_default_context()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with plain.wrap_socket(s, server_hostname="127.0.0.1"):
                pass
        c.check(False, "TLS without the pinned certificate is refused")
    except ssl.SSLCertVerificationError:
        c.check(True, "TLS without the pinned certificate is refused")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with cl.ctx.wrap_socket(s, server_hostname="localhost") as t:
                c.check(t.version() in ("TLSv1.2", "TLSv1.3"), "TLS with host name localhost verifies (%s)" % t.version())
    except ssl.SSLError as e:
        c.check(False, "TLS with host name localhost verifies", e)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with cl.ctx.wrap_socket(s, server_hostname="not-a-host.example"):
                pass
        c.check(False, "TLS with a host name not in the certificate is refused")
    except ssl.SSLCertVerificationError:
        c.check(True, "TLS with a host name not in the certificate is refused")

    # --- dataset and job ----------------------------------------------------------------------------------------
    train_path = os.path.join(workdir, "train.safetensors")
    test_path = os.path.join(workdir, "test.safetensors")
    make_dataset(train_path, 128, 1)
    make_dataset(test_path, 64, 2)
    with open(train_path, "rb") as f:
        c.check(st_read(f.read()).signature() == {"x": ("U8", (128, 1, 8, 8)), "y": ("I64", (128,))},
                "own safetensors writer/reader round trip (train split)")

    r = cl.request("POST", "/api/v1/admin/jobs", json_body={"name": "x"})
    c.check(r.status == 401, "admin without token: 401", r)
    spec = {"name": "protocol-client-check", "dataset": {"format": "safetensors", "train": train_path,
                                                          "test": test_path},
            "model": {"arch": "mlp", "input_shape": [1, 8, 8], "num_classes": 4, "hidden": [8]},
            "shards": 2, "optimizer": {"name": "sgd", "lr": 0.1}, "overlap_epochs": False,
            "deadline_seconds": 60, "max_epochs": 3, "target_accuracy": 0.99, "seed": 7}
    r = cl.request("POST", "/api/v1/admin/jobs", token=admin, json_body=dict(spec, batchsize=32))
    c.check(r.status == 422, "job spec with an unknown field: 422", r)
    r = cl.request("POST", "/api/v1/admin/jobs", token=admin, json_body=spec)
    c.require(r.status == 201, "POST /api/v1/admin/jobs: 201", r)
    job_id = r.json().get("id")
    c.check(isinstance(job_id, int) and r.json().get("state") == "created", "job created (id %s)" % job_id, r)

    deadline = time.monotonic() + 30
    job = None
    while time.monotonic() < deadline:
        r = cl.request("GET", "/api/v1/admin/jobs/%d" % job_id, token=admin)
        job = r.json() if r.status == 200 else None
        if job and job.get("state") != "created":
            break
        time.sleep(0.1)
    c.require(job is not None and job.get("state") == "running", "job reaches state running", job)
    c.check(job.get("shards") == 2 and job.get("epoch") == 1 and job.get("version") == 0 and
            job.get("updates") == 0 and isinstance(job.get("history"), list), "job status fields", job)

    # --- tokens and enrollment ----------------------------------------------------------------------------------
    r = cl.request("POST", "/api/v1/admin/tokens", token=admin, json_body={"uses": 5, "expires_seconds": 3600})
    c.require(r.status == 201, "POST /api/v1/admin/tokens: 201", r)
    enroll_token = r.json().get("token", "")
    c.check(re.fullmatch(r"gle_[A-Za-z0-9_-]{43}", enroll_token) is not None, "enrollment token format gle_")

    r = cl.request("POST", "/api/v1/agents/enroll", json_body={"name": "no-token"})
    c.check(r.status == 401, "enroll without an enrollment token: 401", r)

    def enroll(name):
        r = cl.request("POST", "/api/v1/agents/enroll",
                       json_body={"enrollment_token": enroll_token, "name": name, "platform": "linux-x86_64",
                                  "hardware": {"cores": 2, "ram_mb": 4096, "gpu": "none"}})
        c.require(r.status == 200, "enroll %s: 200" % name, r)
        e = r.json()
        c.check(re.fullmatch(r"[0-9a-f]{32}", e.get("agent_id", "")) is not None and
                re.fullmatch(r"gag_[A-Za-z0-9_-]{43}", e.get("agent_token", "")) is not None,
                "enroll %s: agent id and gag_ token formats" % name)
        c.check(e.get("signing_public_key") == pubkey_pem, "enroll %s: signing key equals the pinned one" % name)
        return e["agent_id"], e["agent_token"]

    a_id, a_tok = enroll("agent-a")
    b_id, b_tok = enroll("agent-b")
    coordinator_url = "https://localhost:%d" % port  # first host name of the certificate (protocol.md 1)
    seen_coordinator = []

    def lease(tok, who):
        r = cl.request("POST", "/api/v1/work/lease", token=tok,
                       json_body={"capabilities": {"cores": 2, "ram_mb": 4096, "gpu": False, "samples_per_s": 100},
                                  "cached": [], "max_tasks": 1})
        c.require(r.status == 200, "%s: POST /api/v1/work/lease: 200" % who, r)
        tasks = r.json().get("tasks")
        c.require(isinstance(tasks, list) and len(tasks) == 1, "%s: lease reply holds one task" % who, r)
        task = tasks[0]
        try:
            m = verify_manifest(task, pubkey_path, workdir)
            c.check(True, "%s: manifest signature verifies with openssl before parsing" % who)
        except (ManifestError, ValueError) as e:
            c.require(False, "%s: manifest signature verifies with openssl before parsing" % who, e)
        c.check(m.get("agent_id") == (a_id if tok == a_tok else b_id) and m.get("lease_id") == task.get("lease_id")
                and m.get("deadline_ms") == task.get("deadline_ms"),
                "%s: manifest agent_id, lease_id, deadline_ms" % who,
                {k: m.get(k) for k in ("agent_id", "lease_id", "deadline_ms")})
        # Section 1: the coordinator URL is https://<first host name of the certificate>:<port>; section 7.5
        # step 5: an agent checks it names the coordinator it talks to. Checked once (the first manifest).
        if not seen_coordinator:
            seen_coordinator.append(m.get("coordinator"))
            c.check(m.get("coordinator") == coordinator_url,
                    "manifest coordinator is %s (the port actually served)" % coordinator_url, m.get("coordinator"))
        c.check(m.get("deadline_ms") - m.get("issued_ms") == 60_000, "%s: deadline_ms - issued_ms = 60 s" % who)
        return task, m

    # --- agent A: first lease -----------------------------------------------------------------------------------
    task1, m1 = lease(a_tok, "agent A")
    # a tampered manifest must not verify
    tampered = task1["manifest"].replace('"base_version":', '"base_version": ', 1)
    c.check(not openssl_verify(pubkey_path, tampered.encode(), base64.b64decode(task1["signature"]), workdir),
            "a manifest changed by one byte does not verify")
    files = m1.get("files", [])
    c.require([f.get("role") for f in files] == ["model", "weights", "shard"], "manifest files: model, weights, shard",
              files)
    c.check(m1["model"] == spec["model"], "manifest model equals the job's model", m1["model"])
    c.check(m1["subtask"]["epoch"] == 1 and m1["subtask"]["samples"] == 64, "subtask: epoch 1, 64 samples",
            m1["subtask"])
    c.check(m1["hyperparameters"]["seed"] == (7 + m1["subtask"]["workunit_id"] * 1000003) % 2 ** 53,
            "hyperparameters.seed = job seed + workunit_id * 1000003")

    blobs = {}
    for f in files:
        sha = f["sha256"]
        r = cl.request("GET", "/api/v1/files/" + sha, token=a_tok)
        ok = r.status == 200 and len(r.body) == f["size"] and hashlib.sha256(r.body).hexdigest() == sha
        c.require(ok, "download %s file: size and SHA-256 match" % f["role"], r.status)
        c.check(r.header("etag") == '"%s"' % sha and r.header("content-type") == "application/octet-stream",
                "%s file: ETag and Content-Type" % f["role"])
        blobs[f["role"]] = r.body
    sha_model = files[0]["sha256"]
    r = cl.request("GET", "/api/v1/files/" + sha_model, token=a_tok, headers={"If-None-Match": '"%s"' % sha_model})
    c.check(r.status == 304 and r.body == b"", "If-None-Match: 304", r)
    r = cl.request("GET", "/api/v1/files/" + sha_model, token=a_tok, headers={"Range": "bytes=0-15"})
    c.check(r.status == 206 and r.body == blobs["model"][:16] and
            r.header("content-range") == "bytes 0-15/%d" % len(blobs["model"]), "Range: 206", r)
    r = cl.request("HEAD", "/api/v1/files/" + sha_model, token=admin)
    c.check(r.status == 200 and r.header("content-length") == str(len(blobs["model"])), "HEAD with admin token", r)
    r = cl.request("GET", "/api/v1/files/" + sha_model)
    c.check(r.status == 401, "file without token: 401", r)

    c.check(json.loads(blobs["model"]) == m1["model"], "model file equals the manifest's model")
    weights0 = st_read(blobs["weights"])
    expected_sig = {"fc0.weight": ("F32", (8, 64)), "fc0.bias": ("F32", (8,)),
                    "classifier.weight": ("F32", (4, 8)), "classifier.bias": ("F32", (4,))}
    c.require(weights0.signature() == expected_sig, "weights file tensors as in section 9.2", weights0.signature())
    c.check(weights0.metadata.get("gleaner.version") == str(m1["base_version"]) and m1["base_version"] == 0,
            "weights gleaner.version = base_version = 0", weights0.metadata)
    c.check((8 + weights0.header_length) % 8 == 0, "weights data starts at a multiple of 8")
    shard = st_read(blobs["shard"])
    c.check(shard.signature() == {"x": ("U8", (64, 1, 8, 8)), "y": ("I64", (64,))}, "shard x U8 [64,1,8,8], y I64 [64]",
            shard.signature())
    ys = list(shard.values("y"))
    c.check(all(0 <= y < 4 for y in ys) and all(ys.count(k) == 16 for k in range(4)), "shard labels class-balanced")

    limit = weights0.data_length() + 256 * len(weights0.tensors) + 65536
    lease1 = m1["lease_id"]
    r = cl.request("POST", "/api/v1/work/%s/progress" % lease1, token=a_tok,
                   json_body={"step": 1, "of": 2, "loss": 1.2, "samples_per_s": 100.0})
    c.check(r.status == 200 and r.json().get("abort") is False and r.json().get("deadline_ms", 0) >= m1["deadline_ms"],
            "progress on an open lease: 200 abort false", r)

    body1 = result_file(weights0, m1, 0.01, 64)
    r = cl.raw_put("/api/v1/work/%s/result" % lease1, body1, token=a_tok)
    c.require(r.status == 202, "result upload (Expect: 100-continue): 202", r)
    c.check(r.got_continue, "server sent 100 Continue before the body")
    acc = r.json()
    c.check(acc.get("accepted") is True and acc.get("seq") == 1 and acc.get("staleness") == 0,
            "202 body: accepted, seq 1, staleness 0", acc)

    # the same upload again (sections 6.6 and 11.3: 409 "duplicate", before the body is read)
    r = cl.raw_put("/api/v1/work/%s/result" % lease1, body1, token=a_tok)
    c.check(r.status == 409 and "duplicate" in r.body.decode(errors="replace"),
            "same upload again: 409 duplicate (sections 6.6/11.3)", r)
    c.check(not r.got_continue and r.header("connection", "").lower() == "close",
            "duplicate refused without 100 Continue, with Connection: close", (r.got_continue, r.headers))
    r = cl.request("POST", "/api/v1/work/%s/progress" % lease1, token=a_tok, json_body={})
    c.check(r.status == 409, "progress after 202: 409", r)

    # wait until the update is folded in, then check VC-ASGD (epoch 1: a = 1/2)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        job = cl.request("GET", "/api/v1/admin/jobs/%d" % job_id, token=admin).json()
        if job.get("updates") == 1:
            break
        time.sleep(0.1)
    c.require(job.get("updates") == 1 and job.get("version") == 1 and job.get("updates_received") == 1,
              "job: updates = version = updates_received = 1", job)
    r = cl.request("GET", "/api/v1/admin/jobs/%d/weights" % job_id, token=admin)
    c.require(r.status == 200, "export weights: 200", r)
    weights1 = st_read(r.body)
    c.check(weights1.metadata.get("gleaner.version") == "1", "exported gleaner.version = 1", weights1.metadata)
    c.check(weights1.signature() == expected_sig, "exported weights have the model's tensors")

    def check_blend(old, new, client_base, delta, a, what):
        worst = 0.0
        bad = None
        for name in old.names():
            for o, n, b in zip(old.values(name), new.values(name), client_base.values(name)):
                want = f32(a * o + (1 - a) * f32(b + delta))
                if not close_f32(n, want):
                    bad = (name, o, n, want)
                worst = max(worst, abs(n - want))
        c.check(bad is None, what + " (max |diff| %.3g)" % worst, bad)

    check_blend(weights0, weights1, weights0, 0.01, 1 / 2, "VC-ASGD epoch 1: server = 1/2 old + 1/2 client")

    # --- error cases on fresh leases (agent A, shard 1) ----------------------------------------------------------
    task2, m2 = lease(a_tok, "agent A (wrong shape)")
    c.check(m2["subtask"]["shard"] != m1["subtask"]["shard"], "second lease is the other shard")
    bad_shape = result_file(weights0, m2, 0.01, 64,
                            overrides={"classifier.bias": ("F32", [5], to_bytes("F32", [1.0] * 5))})
    r = cl.raw_put("/api/v1/work/%s/result" % m2["lease_id"], bad_shape, token=a_tok)
    c.check(r.status == 422 and "does not match the model" in r.body.decode(errors="replace"),
            "result with a wrong tensor shape: 422", r)
    r = cl.request("POST", "/api/v1/work/%s/progress" % m2["lease_id"], token=a_tok, json_body={})
    c.check(r.status == 409, "progress after a 422: 409 (lease closed)", r)
    r = cl.raw_put("/api/v1/work/%s/result" % m2["lease_id"], result_file(weights0, m2, 0.01, 64), token=a_tok)
    c.check(r.status == 409 and not r.got_continue, "valid upload after a 422: 409 without 100 Continue", r)

    task3, m3 = lease(a_tok, "agent A (NaN)")
    c.check(m3["subtask"]["workunit_id"] == m2["subtask"]["workunit_id"],
            "the refused workunit is handed out again")
    nan_bias = to_bytes("F32", [1.0, float("nan"), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    r = cl.raw_put("/api/v1/work/%s/result" % m3["lease_id"],
                   result_file(weights0, m3, 0.01, 64, overrides={"fc0.bias": ("F32", [8], nan_bias)}),
                   token=a_tok)
    c.check(r.status == 422 and "NaN" in r.body.decode(errors="replace"), "result with a NaN: 422", r)

    task4, m4 = lease(a_tok, "agent A (wrong base_version)")
    r = cl.raw_put("/api/v1/work/%s/result" % m4["lease_id"],
                   result_file(weights0, m4, 0.01, 64, base_version=m4["base_version"] + 7), token=a_tok)
    c.check(r.status == 422 and "version" in r.body.decode(errors="replace"), "result with a wrong base_version: 422", r)

    # --- three refusals in a row quarantine agent A (section 6.6); the admin lifts it (section 13.3) -----------
    r = cl.request("POST", "/api/v1/work/lease", token=a_tok, json_body={"max_tasks": 1})
    c.check(r.status == 200 and r.json().get("tasks") == [] and "quarantined" in r.json().get("quarantined", "")
            and r.json().get("retry_after", 0) >= 600, "agent A quarantined after three refusals: no work, a reason", r)
    r = cl.request("GET", "/api/v1/admin/agents", token=admin)
    quarantined = {a["id"]: a for a in r.json().get("agents", [])}.get(a_id, {}) if r.status == 200 else {}
    c.check(quarantined.get("quarantined") is True and "3 results refused in a row" in
            quarantined.get("quarantine_reason", ""), "admin agents: agent A quarantined, with the reason", quarantined)
    r = cl.request("POST", "/api/v1/admin/agents/%s/release" % a_id, token=admin)
    c.check(r.status == 200 and r.json().get("was_quarantined") is True, "admin lifts agent A's quarantine: 200", r)

    # --- agent A cannot run a subtask and gives its lease back (sections 6.7 and 11) ----------------------------
    task4f, m4f = lease(a_tok, "agent A (gives it back)")
    lease4f = m4f["lease_id"]
    fail_path = "/api/v1/work/%s/fail" % lease4f
    report = {"reason": "shard %d: SHA-256 mismatch after download" % m4f["subtask"]["shard"], "stage": "download"}
    r = cl.request("GET", fail_path, token=a_tok)
    c.check(r.status == 405 and r.header("allow") == "POST", "fail with GET: 405 with Allow: POST", r)
    r = cl.request("POST", fail_path, json_body=report)
    c.check(r.status == 401, "fail without token: 401", r)
    r = cl.request("POST", fail_path, token=admin, json_body=report)
    c.check(r.status == 401, "fail with the admin token: 401", r)
    r = cl.request("POST", fail_path, token=a_tok, body=b'["download"]', headers={"Content-Type": "application/json"})
    c.check(r.status == 400, "fail with a body that is not a JSON object: 400", r)
    for body, field in (({"stage": "download"}, "reason"), ({"reason": "  ", "stage": "download"}, "reason"),
                        ({"reason": 7, "stage": "download"}, "reason"),
                        ({"reason": "x" * 2001, "stage": "download"}, "reason"), ({"reason": "x"}, "stage"),
                        ({"reason": "x", "stage": "unpacking"}, "stage"), ({"reason": "x", "stage": "Worker"}, "stage")):
        r = cl.request("POST", fail_path, token=a_tok, json_body=body)
        error = r.json().get("error", "") if r.status == 400 else ""
        c.check(r.status == 400 and field in error, "fail %s: 400 naming %s" % (json.dumps(body)[:48], field), r)
    r = cl.request("POST", fail_path, token=a_tok, body=b"x" * (64 * 1024 + 1),
                   headers={"Content-Type": "application/json"})
    c.check(r.status == 413, "fail with a body over 64 KiB: 413", r)
    r = cl.request("POST", fail_path, token=b_tok, json_body=report)
    c.check(r.status == 409 and "belongs to another agent" in r.body.decode(errors="replace"),
            "fail of another agent's lease: 409", r)
    r = cl.request("POST", "/api/v1/work/%s/fail" % ("0" * 32), token=a_tok, json_body=report)
    c.check(r.status == 404, "fail of an unknown lease: 404", r)
    r = cl.request("POST", fail_path, token=a_tok, json_body=report)
    c.require(r.status == 200 and r.json() == {"released": True}, "fail: 200 {\"released\": true}", r)
    failed_closed = "lease %s is closed: the agent reported it failed" % lease4f
    r = cl.request("POST", fail_path, token=a_tok, json_body=report)
    c.check(r.status == 409 and r.json().get("error") == failed_closed, "second fail for the lease: 409 (closed)", r)
    r = cl.request("POST", "/api/v1/work/%s/progress" % lease4f, token=a_tok, json_body={})
    c.check(r.status == 409 and r.json().get("error") == failed_closed, "progress after a fail: 409 (closed)", r)
    r = cl.raw_put("/api/v1/work/%s/result" % lease4f, result_file(weights0, m4f, 0.01, 64), token=a_tok)
    c.check(r.status == 409 and not r.got_continue and r.json().get("error") == failed_closed,
            "upload after a fail: 409 (closed) without 100 Continue", r)

    task5, m5 = lease(b_tok, "agent B")
    c.check(m5["subtask"]["workunit_id"] == m4f["subtask"]["workunit_id"],
            "the workunit given back is handed to the next agent at once (before its deadline)")
    lease5 = m5["lease_id"]
    path5 = "/api/v1/work/%s/result" % lease5
    good5 = result_file(weights0, m5, 0.02, 64, total_size=limit)
    c.check(len(good5) == limit, "a valid result padded to exactly the size limit (%d bytes)" % limit)
    r = cl.raw_put(path5, good5, token=a_tok)
    c.check(r.status == 409 and "another agent" in r.body.decode(errors="replace") and not r.got_continue,
            "upload for another agent's lease: 409 without 100 Continue", r)
    r = cl.raw_put(path5, good5, token=None)
    c.check(r.status == 401 and not r.got_continue and r.header("connection", "").lower() == "close",
            "upload without token: 401 without 100 Continue, Connection: close", (r, r.headers))
    r = cl.raw_put(path5, good5, token=admin)
    c.check(r.status == 401, "upload with the admin token: 401", r)
    r = cl.raw_put(path5, b"", token=b_tok, content_length=limit + 1)
    c.check(r.status == 413 and not r.got_continue and r.header("connection", "").lower() == "close",
            "oversized upload (Content-Length = limit + 1): 413, no 100 Continue, Connection: close", r)
    r = cl.raw_put(path5, good5 + b" ", token=b_tok, expect_continue=False)
    c.check(r.status == 413, "oversized upload without Expect (body sent): 413", r)
    r = cl.request("GET", "/api/v1/info")
    c.check(r.status == 200 and r.json().get("protocol") == 1, "server still answers GET /api/v1/info", r)
    r = cl.request("POST", "/api/v1/work/%s/progress" % lease5, token=b_tok, json_body={"step": 1})
    c.check(r.status == 200 and r.json().get("abort") is False, "agent B's lease still open after the refusals", r)

    r = cl.request("GET", "/api/v1/admin/agents", token=admin)
    agents = {a["id"]: a for a in r.json().get("agents", [])} if r.status == 200 else {}
    c.check(agents.get(a_id, {}).get("invalid") == 3 and agents.get(a_id, {}).get("done") == 1 and
            agents.get(a_id, {}).get("failed") == 1 and agents.get(b_id, {}).get("failed") == 0,
            "admin agents: agent A has done 1, invalid 3, failed 1; agent B failed 0", agents)

    # --- accept an update, SIGKILL, restart ---------------------------------------------------------------------
    r = cl.raw_put(path5, good5, token=b_tok)
    c.require(r.status == 202 and r.json().get("seq") == 2, "upload of exactly the size limit: 202 seq 2", r)
    job = cl.request("GET", "/api/v1/admin/jobs/%d" % job_id, token=admin).json()
    received = job.get("updates_received")
    c.check(received == 2, "updates_received = 2 before the kill", job)
    r = cl.raw_put(path5, good5, token=b_tok)
    c.check(r.status == 409 and "duplicate" in r.body.decode(errors="replace"),
            "same upload again on agent B's lease: 409 duplicate", r)
    # epoch 1 is complete: with overlap_epochs false, epoch 2 opens once epoch 1 is validated (section 11.6)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        job = cl.request("GET", "/api/v1/admin/jobs/%d" % job_id, token=admin).json()
        if job.get("epoch") == 2:
            break
        time.sleep(0.1)
    hist = job.get("history") or [{}]
    c.check(job.get("epoch") == 2 and job.get("state") == "running" and hist[0].get("epoch") == 1 and
            hist[0].get("updates") == 2, "epoch 1 validated (history), epoch 2 open", job)
    task6, m6 = lease(a_tok, "agent A (epoch 2, open across the restart)")
    c.check(m6["subtask"]["epoch"] == 2, "epoch 2 workunit handed out", m6["subtask"])
    server.signal(signal.SIGKILL)
    c.check(server.wait(10) is not None, "server died on SIGKILL")
    server.kill()

    port = server.start()
    cl = Client("127.0.0.1", port, cafile)
    c.check(True, "server restarted (port %d)" % port)
    r = cl.request("GET", "/api/v1/admin/jobs/%d" % job_id, token=admin)
    c.require(r.status == 200, "job status after restart: 200", r)
    c.check(r.json().get("updates_received") == received, "accepted update count unchanged after SIGKILL", r.json())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        job = cl.request("GET", "/api/v1/admin/jobs/%d" % job_id, token=admin).json()
        if job.get("updates") == 2:
            break
        time.sleep(0.1)
    c.check(job.get("updates") == 2 and job.get("version") == 2, "both updates folded in after restart", job)
    r = cl.request("GET", "/api/v1/admin/jobs/%d/weights" % job_id, token=admin)
    if c.check(r.status == 200, "export weights after restart: 200", r):
        weights2 = st_read(r.body)
        c.check(weights2.metadata.get("gleaner.version") == "2", "exported gleaner.version = 2", weights2.metadata)
        check_blend(weights1, weights2, weights0, 0.02, 1 / 2,
                    "VC-ASGD second epoch-1 update: server = 1/2 old + 1/2 client")
    r = cl.request("POST", "/api/v1/work/%s/progress" % m6["lease_id"], token=a_tok, json_body={})
    c.check(r.status == 200 and r.json().get("abort") is False, "an open lease survives the restart (progress 200)", r)
    r = cl.raw_put("/api/v1/work/%s/result" % m6["lease_id"], result_file(weights0, m6, 0.01, 64),
                   token=a_tok)
    c.check(r.status == 202 and r.json().get("seq") == 3, "upload on the open lease after the restart: 202 seq 3", r)
    r = cl.raw_put(path5, good5, token=b_tok)
    c.check(r.status == 409 and "duplicate" in r.body.decode(errors="replace"),
            "after the restart, a duplicate upload of an accepted lease: 409 duplicate (sections 6.6/11.3)", r)
    r = cl.request("POST", fail_path, token=a_tok, json_body=report)
    c.check(r.status == 409 and r.json().get("error") == failed_closed,
            "after the restart, the lease given back stays closed: fail 409 (section 6.7)", r)
    r = cl.request("POST", "/api/v1/work/%s/progress" % lease4f, token=a_tok, json_body={})
    c.check(r.status == 409 and r.json().get("error") == failed_closed,
            "after the restart, progress on the lease given back: 409, not revived", r)
    r = cl.request("GET", "/api/v1/admin/agents", token=admin)
    agents = {a["id"]: a for a in r.json().get("agents", [])} if r.status == 200 else {}
    c.check(agents.get(a_id, {}).get("failed") == 1, "after the restart, agent A still has failed 1", agents.get(a_id))

    # --- SIGTERM ------------------------------------------------------------------------------------------------
    server.signal(signal.SIGTERM)
    rc = server.wait(20)
    c.check(rc == 0, "SIGTERM: server exits 0", rc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator", required=True, help="path of the gleaner-coordinator binary")
    ap.add_argument("--workdir", required=True, help="scratch folder (created, emptied at start)")
    args = ap.parse_args()
    socket.setdefaulttimeout(15)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
