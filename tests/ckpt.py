#!/usr/bin/env python3
"""ckpt.py — checkpoint variants for tests/weights.sh, made at test time from a
committed fixture (standard library only: CI has no torch or numpy).

  ckpt.py shards SRC DIR N DTYPE [--drop T] [--dup T] [--reshape T] [--int T]
        SRC's tensors (sorted by name) cut into N shards as save_pretrained
        writes them: DIR/diffusion_pytorch_model-0000i-of-0000N.safetensors and
        DIR/diffusion_pytorch_model.safetensors.index.json; in DTYPE (F32, BF16,
        F16). Damage for the hostile tests: --drop leaves T out of every shard
        and the index, --dup writes T into a second shard too, --reshape
        flattens T, --int writes T as I32.
  ckpt.py convert SRC OUT DTYPE   SRC whole in DTYPE
  ckpt.py round SRC OUT DTYPE     SRC in F32, each value rounded through DTYPE
                                  (the reference of a DTYPE run: BF16 and F16
                                  widen to F32 exactly)
  ckpt.py sparse SRC OUT GIB      SRC and an unused U8 tensor of GIB GiB that is
                                  a hole in the file (nothing reads it)
  ckpt.py dtypes FILE             "NAME DTYPE" per tensor
  ckpt.py setmeta FILE KEY VALUE  one metadata entry changed in place
  ckpt.py getmeta FILE KEY        one metadata entry's value
  ckpt.py flatten FILE T          tensor T made 1-D in place (metadata kept)
  ckpt.py extra FILE T...         one-value F32 tensors T added in place
                                  (metadata kept): tensors a graph does not use
"""
import json
import os
import struct
import sys
from array import array

SIZE = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "U8": 1}


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        base = 8 + n
        meta = h.pop("__metadata__", {})
        out = {}
        for k, v in h.items():
            s, e = v["data_offsets"]
            f.seek(base + s)
            out[k] = (v["dtype"], v["shape"], f.read(e - s))
    return out, meta


def save(path, tensors, meta=None, holes=()):
    """tensors: name -> (dtype, shape, bytes); holes: (name, dtype, shape,
    nbytes) whose bytes are left a hole at the end of the file."""
    h = {}
    if meta:
        h["__metadata__"] = meta
    at = 0
    for k, (dt, shape, b) in tensors.items():
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(b)]}
        at += len(b)
    for k, dt, shape, nbytes in holes:
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + nbytes]}
        at += nbytes
    text = json.dumps(h, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, (_, _, b) in tensors.items():
            f.write(b)
        f.truncate(8 + len(text) + at)


def floats(dt, b):
    if dt == "F32":
        return array("f", b)
    if dt == "BF16":
        # the high half of each little-endian float32
        wide = bytearray(2 * len(b))
        wide[2::4] = b[0::2]
        wide[3::4] = b[1::2]
        return array("f", bytes(wide))
    if dt == "F16":
        return array("f", struct.unpack(f"<{len(b) // 2}e", b))
    sys.exit(f"ckpt.py: cannot read {dt} as floats")


def encode(dt, values):
    """float32 values in dt, rounded to nearest even."""
    if dt == "F32":
        return array("f", values).tobytes()
    if dt == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    if dt == "BF16":
        bits = array("I", array("f", values).tobytes())
        out = array("H")
        for u in bits:
            if (u & 0x7f800000) == 0x7f800000 and u & 0x7fffff:
                out.append((u >> 16) | 0x40)  # NaN stays NaN
            else:
                out.append(((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff)
        return out.tobytes()
    sys.exit(f"ckpt.py: cannot write {dt}")


def convert(t, dt):
    src, shape, b = t
    return (dt, shape, encode(dt, floats(src, b)))


def main(argv):
    cmd = argv[1]
    if cmd == "shards":
        src, out, n, dt = argv[2], argv[3], int(argv[4]), argv[5]
        opts = dict(zip(argv[6::2], argv[7::2]))
        tensors, _ = load(src)
        names = sorted(tensors)
        if "--drop" in opts:
            names.remove(opts["--drop"])
        os.makedirs(out, exist_ok=True)
        shards = [names[i * len(names) // n:(i + 1) * len(names) // n] for i in range(n)]
        dup_into = next((i for i, g in enumerate(shards) if opts.get("--dup") not in g), None)
        wmap = {}
        for i, group in enumerate(shards):
            fname = f"diffusion_pytorch_model-{i + 1:05d}-of-{n:05d}.safetensors"
            part = {}
            for k in group:
                part[k] = convert(tensors[k], dt)
                wmap[k] = fname
            if "--dup" in opts and i == dup_into:
                part[opts["--dup"]] = convert(tensors[opts["--dup"]], dt)
            if opts.get("--reshape") in part:
                d, shape, b = part[opts["--reshape"]]
                count = 1
                for s in shape:
                    count *= s
                part[opts["--reshape"]] = (d, [count], b)
            if opts.get("--int") in part:
                d, shape, b = part[opts["--int"]]
                count = len(b) // SIZE[d]
                part[opts["--int"]] = ("I32", shape, bytes(4 * count))
            save(os.path.join(out, fname), part, {"format": "pt"})
        total = sum(len(convert(tensors[k], dt)[2]) for k in names)
        with open(os.path.join(out, "diffusion_pytorch_model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2,
                      sort_keys=True)
            f.write("\n")
    elif cmd == "convert":
        tensors, meta = load(argv[2])
        save(argv[3], {k: convert(t, argv[4]) for k, t in tensors.items()}, meta)
    elif cmd == "round":
        tensors, meta = load(argv[2])
        save(argv[3], {k: ("F32", t[1], array("f", floats(argv[4], convert(t, argv[4])[2])).tobytes())
                       for k, t in tensors.items()}, meta)
    elif cmd == "sparse":
        tensors, meta = load(argv[2])
        nbytes = int(argv[4]) << 30
        save(argv[3], tensors, meta, holes=[("zz.unused", "U8", [nbytes], nbytes)])
    elif cmd == "dtypes":
        tensors, _ = load(argv[2])
        for k in sorted(tensors):
            print(k, tensors[k][0])
    elif cmd == "setmeta":
        tensors, meta = load(argv[2])
        meta[argv[3]] = argv[4]
        save(argv[2], tensors, meta)
    elif cmd == "getmeta":
        print(load(argv[2])[1][argv[3]])
    elif cmd == "flatten":
        tensors, meta = load(argv[2])
        dt, shape, b = tensors[argv[3]]
        tensors[argv[3]] = (dt, [len(b) // SIZE[dt]], b)
        save(argv[2], tensors, meta)
    elif cmd == "extra":
        tensors, meta = load(argv[2])
        for name in argv[3:]:
            tensors[name] = ("F32", [1], array("f", [1.0]).tobytes())
        save(argv[2], tensors, meta)
    else:
        sys.exit(f"ckpt.py: unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
