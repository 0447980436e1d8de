#!/usr/bin/env python3
"""gen.py — a property test of the whole compiler: random small models and plans.

    python3 tests/prop/gen.py --dtpc BUILD/dtpc --out DIR [--seed S] [--count N]
                              [--only I] [--known-bugs] [--keep] [--jobs N]

Each case is a random model (linear, layer/rms norms, gelu/silu/tanh/sigmoid, add/mul,
modulate, slice/concat, reshape, rope (both conventions), index_select /
index_copy, attention: self, cross and joint
text+image, fused QKV, per-head norms, key-padding masks (with pad for the
joint one), repeat blocks) with odd sizes and head
counts, and a plan over a mesh of 1 to 8 ranks (colwise, packed colwise,
rowwise, ring, ulysses, split, gather, fsdp; both rotate methods; the anything modes
on uneven sizes), sometimes split over two files with an import, sometimes with
-D, --mesh and --context on the command line. Most are meant to be valid; some
carry a deliberate mistake. The properties, whatever the plan:

  - `dtpc check` exits 0 or 1, never crashes, never times out, never says
    "internal error";
  - a plan it accepts compiles (`dtpc FILE -o G`, exit 0) and replays on its
    ranks equal to the one-rank model (`dtpc run G --verify`, local backend);
  - a plan it refuses has a located error (FILE:LINE:COL: error:), and the
    compiler refuses it too, with exit 1.

Case I of seed S is drawn from its own generator seeded with "S/I": a run is
deterministic, and --only I rebuilds one case. A failing case keeps its files
under DIR/fail-S-I/ and prints the command that reproduces it. Prints
"prop: N generated, N accepted, N refused, N runs" and the closing
"prop: N passed, N failed, N skipped" that tests/run.sh counts.

--jobs N tests N cases at a time (default: the machine's cores), each in a
folder of its own; the report is in case order whatever N, and the same.

--known-bugs[=NAME,...] also draws the shapes of bugs known today (all, or
those named; see KNOWN_BUGS); without it they are left out so that make test
stays green until the fixes land. Switch one on for good by deleting it from
KNOWN_BUGS.
"""
import argparse
import concurrent.futures
import os
import random
import re
import shutil
import subprocess
import sys
import time

# Shapes the generator avoids unless --known-bugs: each is a plan that checks
# clean today and then fails to compile or run (issue 7). Delete an entry when
# its fix lands; the generator then draws it always.
KNOWN_BUGS = set()

LOCATED = re.compile(r"^[^\n:]+:\d+:\d+: error: ", re.M)
TIMEOUT = 120  # seconds per dtpc command: far above what a tiny model needs


class Case:
    """One random model and plan, as source text plus command-line options."""

    def __init__(self, rng, known_bugs):
        self.r = rng
        self.bugs = known_bugs
        self.lines = []
        self.modules = {}  # role -> module names, as globs see them
        self.args = []     # options for both check and compile
        self.cur = "x"     # the name of the residual stream now
        # key-padding masks from a generator of their own, so that adding
        # them left every other draw of a seed's cases as it was
        self.mr = random.Random(repr(rng.getstate()))
        # fsdp styles likewise (another stream of the same state)
        self.fr = random.Random(repr(rng.getstate()) + "/fsdp")
        # rope's "half" convention (its tables' width R, even, at most the
        # head dim) and the index ops likewise
        self.hr = random.Random(repr(rng.getstate()) + "/half")
        # rope's "split" convention (per-head tables) and the tables from
        # ltx2_rope_freqs likewise
        self.sr = random.Random(repr(rng.getstate()) + "/split")

    def allow(self, bug):
        return bug in self.bugs or bug not in KNOWN_BUGS

    def chance(self, p):
        return self.r.random() < p

    def stmt(self, indent, text):
        self.lines.append("  " * indent + text)

    def role(self, role, name):
        self.modules.setdefault(role, []).append(name)

    # -- the model -------------------------------------------------------------
    def model(self):
        r = self.r
        self.batch = r.choice([1, 1, 2])
        self.heads = r.choice([1, 2, 3, 4, 4, 4, 5, 6, 8, 8, 12])
        self.hdim = r.choice([2, 4, 4, 6, 8])
        self.seq = r.choice([4, 5, 6, 7, 8, 8, 9, 12, 12, 12, 13, 16, 24, 24])
        self.txt = r.choice([2, 3, 4, 4, 5, 8, 8, 12])
        self.ffn = r.choice([8, 12, 16, 24, 30, 32])
        self.nblocks = r.choice([1, 1, 2, 3])
        self.use_repeat = self.chance(0.7)
        f = {
            "rope": self.chance(0.4),
            "qknorm": self.chance(0.3),
            "modulate": self.chance(0.35),
            "fused": self.chance(0.2),
            "reshape": self.chance(0.2),
            "ffn": self.chance(0.7),
            "ffn_rope": self.chance(0.3),  # full-width rope on a colwise tensor
            "mulgate": self.chance(0.15),
            "pos": self.chance(0.2),
            "attn": r.choice(["self", "self", "self", "cross", "joint"]),
        }
        # a key-padding mask on every attention: on the keys' input (x, or
        # ctx), padded with ones over the image tokens of a joint attention
        self.mask = (("x_mask" if f["attn"] == "self" else "ctx_mask")
                     if self.mr.random() < 0.3 else None)
        if f["pos"] and self.chance(0.5):
            # a [seq, hidden] operand where batch == seq: PyTorch aligns it right
            self.batch = self.seq = r.choice([2, 3])
        self.f = f
        p = ["batch = %d" % self.batch, "seq = %d" % self.seq,
             "heads = %d" % self.heads, "head_dim = %d" % self.hdim,
             "hidden = heads * head_dim", "ffn = %d" % self.ffn]
        if f["attn"] != "self":
            p.append("txt = %d" % self.txt)
        self.stmt(0, "model m(%s) {" % ", ".join(p))
        self.stmt(1, "input x : [batch, seq, hidden];")
        if f["attn"] != "self":
            self.stmt(1, "input ctx : [batch, txt, hidden];")
        if self.mask:
            self.stmt(1, "input %s : [batch, %s];" % (self.mask, "seq" if f["attn"] == "self"
                                                        else "txt"))
        # rope's "half" convention over R of the head's channels
        self.half = (self.hr.choice([r_ for r_ in range(2, self.hdim + 1, 2)])
                     if f["rope"] and self.hr.random() < 0.3 else None)
        # index_select of the residual stream's rows by a permutation the
        # model makes (text_ids' positions rotated), before the output
        self.index = self.hr.random() < 0.2 and self.seq > 2
        # rope's "split" convention: each head's halves, its own tables
        self.split = (f["rope"] and self.half is None and self.hdim % 2 == 0 and
                      self.sr.random() < 0.25)
        # the tables made by LTX-2's generator (no operand: whole on every
        # rank, sliced where q and k are split) instead of inputs: one row
        # per audio frame, as wide as the convention takes
        self.gen_tables = f["rope"] and self.sr.random() < 0.3
        if f["rope"]:
            rows = "seq + txt" if f["attn"] == "joint" else "seq"
            width = ("heads * head_dim // 2" if self.split else
                     "head_dim" if self.half is None else str(self.half))
            if self.gen_tables:
                dim = "heads * head_dim" if self.split else width
                rt = ', rope_type = "split"' if self.split else ""
                for part in ("cos", "sin"):
                    self.stmt(1, '%s = ltx2_rope_freqs(%s, %s, axes = 1, modality = "audio", '
                              'part = "%s"%s);' % (part, dim, rows, part, rt))
            else:
                self.stmt(1, "input cos : [%s, %s];" % (rows, width))
                self.stmt(1, "input sin : [%s, %s];" % (rows, width))
        if f["ffn_rope"]:
            self.stmt(1, "input fcos : [seq, ffn];")
            self.stmt(1, "input fsin : [seq, ffn];")
        if f["modulate"]:
            self.stmt(1, "input temb : [batch, hidden];")
            self.stmt(1, "temb_act = silu(temb);")
            self.stmt(1, "emb = linear(temb_act, 2 * hidden);")
            self.role("emb", "emb")
        if f["pos"]:
            self.stmt(1, "pos = param([seq, hidden]);")
            self.stmt(1, "x0 = add(x, pos);")
            self.cur = "x0"
        if self.use_repeat:
            self.stmt(1, "repeat blocks[%d] {" % self.nblocks)
            self.block(2, "")
            self.stmt(1, "}")
        else:
            for b in range(self.nblocks):
                self.block(1, "b%d_" % b)
        width = r.choice(["hidden", "hidden", "7", "ffn"])
        self.stmt(1, "out = linear(%s, %s);" % (self.cur, width))
        self.role("out", "out")
        outs = ["out"]
        if self.index:
            # the rows of out picked by seq's positions rotated by one, and
            # written back by them (index_select, index_copy)
            self.stmt(1, "ids = text_ids(seq, axes = 1);")
            self.stmt(1, "ids_flat = reshape(ids, [seq]);")
            self.stmt(1, "perm_tail = slice(ids_flat, dim = 0, start = 1, length = seq - 1);")
            self.stmt(1, "perm_head = slice(ids_flat, dim = 0, start = 0, length = 1);")
            self.stmt(1, "perm = concat(perm_tail, perm_head, dim = 0);")
            self.stmt(1, "picked = index_select(out, perm, dim = 1);")
            self.stmt(1, "back = index_copy(out, perm, picked, dim = 1);")
            outs.append("back")
        if self.chance(0.05):
            outs.append("out")  # twice: an error
        elif self.chance(0.1):
            outs.append(self.cur)
        self.stmt(1, "output %s;" % ", ".join(outs))
        self.stmt(0, "}")

    def update(self, ind, local, what, expr):
        """The residual stream becomes expr: carried through a repeat as the
        same name, a new name outside (a scope assigns a name once)."""
        if not self.use_repeat:
            self.cur = local + what
        self.stmt(ind, "%s = %s;" % (self.cur, expr))

    def block(self, ind, local):
        """One transformer block on the residual stream. local: the prefix of
        names outside a repeat (b0_); in a repeat, blocks.{i}. comes by itself
        and globs see blocks.*."""
        r, f = self.r, self.f
        glob = "blocks.*." if self.use_repeat else local

        def name(s):
            return local + s

        def mod(s):
            return glob + s

        norm = name("norm1")
        if self.chance(0.7):
            eps = r.choice(["", ", eps = 1e-6", ""])
            aff = ", affine = false" if f["modulate"] and self.chance(0.5) else ""
            self.stmt(ind, "%s = layer_norm(%s%s%s);" % (norm, self.cur, eps, aff))
        else:
            self.stmt(ind, "%s = rms_norm(%s);" % (norm, self.cur))
        if f["modulate"]:
            sh, sc = name("shift"), name("scale")
            self.stmt(ind, "%s = slice(emb, dim = 1, start = 0, length = hidden);" % sh)
            self.stmt(ind, "%s = slice(emb, dim = -1, start = hidden, length = hidden);" % sc)
            # [batch, 1, hidden] broadcasts over the sequence; a bare
            # [batch, hidden] aligns right (PyTorch) and is refused, or taken
            # as [1, seq, hidden] where batch == seq
            if self.chance(0.8):
                for t in (sh, sc):
                    self.stmt(ind, "%s3 = reshape(%s, [batch, 1, hidden]);" % (t, t))
                sh, sc = sh + "3", sc + "3"
            m = name("mod")
            self.stmt(ind, "%s = modulate(%s, %s, %s);" % (m, norm, sh, sc))
            norm = m
        q, k, v = name("attn.to_q"), name("attn.to_k"), name("attn.to_v")
        kv_src = "ctx" if f["attn"] == "cross" else norm
        if f["fused"] and f["attn"] != "cross":
            qkv = name("attn.to_qkv")
            self.stmt(ind, "%s = linear(%s, 3 * hidden);" % (qkv, norm))
            self.role("qkv", mod("attn.to_qkv"))
            for i, t in enumerate((q, k, v)):
                self.stmt(ind, "%s = slice(%s, dim = 2, start = %s, length = hidden);"
                          % (t, qkv, ["0", "hidden", "2 * hidden"][i]))
        else:
            self.stmt(ind, "%s = linear(%s, hidden);" % (q, norm))
            self.stmt(ind, "%s = linear(%s, hidden%s);" % (k, kv_src, r.choice(["", ", bias = false"])))
            self.stmt(ind, "%s = linear(%s, hidden);" % (v, kv_src))
            for t in ("q", "k", "v"):
                self.role("qkv1", mod("attn.to_" + t))
        if f["qknorm"]:
            nq, nk = name("attn.norm_q"), name("attn.norm_k")
            self.stmt(ind, "%s = rms_norm(%s, dim = head_dim);" % (nq, q))
            self.stmt(ind, "%s = rms_norm(%s, dim = head_dim, eps = 1e-5);" % (nk, k))
            q, k = nq, nk
        if f["attn"] == "joint":
            cq, ck, cv = name("ctx_q"), name("ctx_k"), name("ctx_v")
            for t, s in ((cq, "q"), (ck, "k"), (cv, "v")):
                self.stmt(ind, "%s = linear(ctx, hidden);" % t)
                self.role("ctxproj", mod("ctx_" + s))
            jq, jk, jv = name("jq"), name("jk"), name("jv")
            self.stmt(ind, "%s = concat(%s, %s, dim = 1);" % (jq, cq, q))
            self.stmt(ind, "%s = concat(%s, %s, dim = 1);" % (jk, ck, k))
            self.stmt(ind, "%s = concat(%s, %s, dim = -2);" % (jv, cv, v))
            q, k, v = jq, jk, jv
        if f["rope"] and f["attn"] != "cross":
            rq, rk = name("attn.rq"), name("attn.rk")
            conv = (', convention = "split"' if self.split else
                    "" if self.half is None else ', convention = "half"')
            self.stmt(ind, "%s = rope(%s, cos, sin, heads = heads%s);" % (rq, q, conv))
            self.stmt(ind, "%s = rope(%s, cos, sin, heads = heads%s);" % (rk, k, conv))
            q, k = rq, rk
        a = name("attn")
        mask = ""
        if self.mask and f["attn"] == "joint":
            jm = name("joint_mask")
            self.stmt(ind, "%s = pad(%s, dim = 1, after = seq, value = 1);" % (jm, self.mask))
            mask = ", mask = " + jm
        elif self.mask:
            mask = ", mask = " + self.mask
        self.stmt(ind, "%s = attention(%s, %s, %s, heads = heads%s);" % (a, q, k, v, mask))
        self.role("attn", mod("attn"))
        if f["attn"] == "joint":
            ai = name("attn_img")
            self.stmt(ind, "%s = slice(%s, dim = 1, start = txt, length = seq);" % (ai, a))
            a = ai
        if f["reshape"]:
            w, bk = name("wide"), name("back")
            self.stmt(ind, "%s = reshape(%s, [batch, seq, heads, head_dim]);" % (w, a))
            self.stmt(ind, "%s = reshape(%s, [batch, seq, hidden]);" % (bk, w))
            a = bk
        o = name("attn.to_out")
        self.stmt(ind, "%s = linear(%s, hidden);" % (o, a))
        self.role("rowwise", mod("attn.to_out"))
        if f["mulgate"]:
            g = name("gated")
            self.stmt(ind, "%s = mul(%s, %s);" % (g, o, r.choice([self.cur, o])))
            o = g
        self.update(ind, local, "res1", "add(%s, %s)" % (self.cur, o))
        if f["ffn"]:
            n2 = name("norm2")
            self.stmt(ind, "%s = layer_norm(%s);" % (n2, self.cur))
            f1, act, f2 = name("ff.proj"), name("ff.act"), name("ff.out")
            self.stmt(ind, "%s = linear(%s, ffn);" % (f1, n2))
            self.role("ffn1", mod("ff.proj"))
            if f["ffn_rope"]:
                fr = name("ff.rot")
                self.stmt(ind, "%s = rope(%s, fcos, fsin, heads = 1);" % (fr, f1))
                f1 = fr
            if self.chance(0.5):
                self.stmt(ind, "%s = gelu(%s%s);" % (act, f1, r.choice(["", ", approximate = \"tanh\""])))
            else:
                # the unary ops (ops.def's UNARY): silu fuses with the
                # linear before it, tanh and sigmoid do not
                self.stmt(ind, "%s = %s(%s);" % (act, r.choice(["silu", "tanh", "sigmoid"]), f1))
            self.stmt(ind, "%s = linear(%s, hidden);" % (f2, act))
            self.role("rowwise", mod("ff.out"))
            self.update(ind, local, "res2", "add(%s, %s)" % (f2, self.cur))

    # -- the plan --------------------------------------------------------------
    def mesh(self):
        """A mesh of 1 to 8 ranks over ring, ulysses, tp (now and then cfg)."""
        r = self.r
        while True:
            axes = []
            for ax in r.sample(["ring", "ulysses", "tp"], 3):
                size = r.choice([1, 1, 2, 2, 2, 3, 4])
                if size > 1 or self.chance(0.15):
                    axes.append((ax, size))
            # cfg splits the batch (x is [batch, ...]): only an even one
            if self.chance(0.05) and self.batch % 2 == 0:
                axes.append(("cfg", 2))
            world = 1
            for _, s in axes:
                world *= s
            if world <= 8:
                break
        if not axes:
            axes = [("tp", 1)]
        if self.chance(0.8):  # outermost first, as the docs suggest; any order is legal
            order = {"cfg": 0, "ring": 1, "ulysses": 2, "tp": 3}
            axes.sort(key=lambda a: order[a[0]])
        self.axes = dict(axes)
        return ", ".join("%s = %d" % a for a in axes)

    def plan(self):
        r = self.r
        mesh = self.mesh()
        ring = self.axes.get("ring", 1)
        uly = self.axes.get("ulysses", 1)
        tp = self.axes.get("tp", 1)
        self.stmt(0, "plan p {")
        self.stmt(1, "model m%s;" % ("(seq = %d)" % self.seq if self.chance(0.3) else ""))
        if self.chance(0.85):
            self.stmt(1, "mesh %s;" % mesh)
        else:
            self.args += ["--mesh", mesh]  # the plan has no mesh of its own
        ctx = []
        if ring > 1 or self.chance(0.2):
            ctx.append('rotate_method = "%s"' % r.choice(["allgather", "alltoall"]))
        uneven = self.seq % (ring * uly) != 0 or self.heads % (uly * tp) != 0
        if uneven or self.chance(0.1):
            if uly > 1 and (ring == 1 or self.chance(0.1)):
                ctx.append("ulysses_anything = true")
            elif ring > 1 and (uly == 1 or self.chance(0.1)):
                ctx.append("ring_anything = true")
        if self.chance(0.1):
            ctx.append("convert_to_fp32 = true")
        if ctx:
            if self.chance(0.25):
                self.args += ["--context", ", ".join(ctx)]
            else:
                self.stmt(1, "context %s;" % ", ".join(ctx))
        if tp > 1 and self.chance(0.1):
            self.stmt(1, "tensor tp_degree = %d;" % tp)
        self.rules(ring, uly, tp)
        self.stmt(0, "}")

    def rules(self, ring, uly, tp):
        r, f = self.r, self.f

        def rule(glob, style):
            self.stmt(1, '"%s" : %s;' % (glob, style))

        def each(role):
            return list(dict.fromkeys(self.modules.get(role, [])))

        if tp > 1 or self.chance(0.3):
            if each("qkv1") and self.use_repeat and self.chance(0.5):
                rule("blocks.*.attn.to_{q,k,v}", "colwise")
            else:
                for nm in each("qkv1"):
                    rule(nm, "colwise")
            # a plain colwise QKV is gathered before its slices: replicated q,
            # k, v, which a joint concat meets with colwise text
            plain = self.chance(0.3)
            for nm in each("qkv"):
                rule(nm, "colwise" if plain else "colwise(blocks = [hidden, hidden, hidden])")
            if f["attn"] == "joint" and self.chance(0.8):
                # the text projections mostly sharded like the image ones; else
                # the joint concat meets a replicated and a colwise tensor
                for nm in each("ctxproj"):
                    rule(nm, "colwise")
            for nm in each("rowwise"):
                if self.chance(0.9):
                    rule(nm, "rowwise")
            for nm in each("ffn1"):
                if self.chance(0.9):
                    rule(nm, "colwise")
            if each("emb") and self.chance(0.2):
                rule("emb", "colwise")
        if ring * uly > 1 or self.chance(0.2):
            styles = []
            if ring > 1 or self.chance(0.1):
                styles.append("ring")
            if uly > 1 or self.chance(0.1):
                styles.append("ulysses")
            r.shuffle(styles)
            if styles:
                for nm in each("attn"):
                    rule(nm, ", ".join(styles))
            splits = ["split(x, dim = 1)"]
            # the tables of a joint text + image rope stay whole
            if f["rope"] and f["attn"] != "joint" and self.chance(0.6):
                dim = 1 if self.chance(0.2) else 0
                if not self.gen_tables:  # generated tables are not inputs
                    splits += ["split(cos, dim = %d)" % dim, "split(sin, dim = %d)" % dim]
            if f["attn"] != "self" and self.chance(0.8):
                splits.append("split(ctx, dim = 1)")
            if self.mask and self.mr.random() < 0.6:
                splits.append("split(%s, dim = 1)" % self.mask)
            if self.chance(0.9):
                rule("", ", ".join(splits))
            if self.chance(0.8):
                rule("out", "gather(dim = %d)" % r.choice([1] * 9 + [2]))
            elif self.use_repeat and self.chance(0.5):
                rule("blocks.%d" % (self.nblocks - 1), "gather(dim = 1)")
        # FSDP: the root's, the blocks' or one linear's weights split over
        # ring x ulysses (nothing at ring x ulysses = 1)
        fr = self.fr
        if fr.random() < 0.3:
            linears = each("qkv1") + each("rowwise") + each("ffn1")
            globs = [""] + (["blocks.*"] if self.use_repeat else []) + linears[:3]
            rule(fr.choice(globs), "fsdp")

    def mistake(self):
        """One deliberate error, so that refusals reach beyond the
        divisibility checks the random sizes already hit."""
        r = self.r
        end = len(self.lines) - 1  # the plan's closing brace
        k = r.choice(["typo-style", "no-match", "bad-dim", "bad-axis", "wrong-op",
                      "bad-define", "bad-context", "dup-axis", "syntax", "bad-shape"])
        if k == "typo-style":
            self.lines.insert(end, '  "out" : colwsie;')
        elif k == "no-match":
            self.lines.insert(end, '  "nothing.here" : colwise;')
        elif k == "bad-dim":
            self.lines.insert(end, '  "" : split(x, dim = 3);')
        elif k == "bad-axis":
            self.args += ["--mesh", "ring = 2, pipeline = 2"]
        elif k == "wrong-op":
            self.lines.insert(end, '  "%s" : colwise;' % r.choice(self.modules["attn"]))
        elif k == "bad-define":
            self.args += ["-D", r.choice(["seqq=4", "seq=0", "heads=-1", 'seq="a"', "seq=1.5"])]
        elif k == "bad-context":
            self.args += ["--context", r.choice(['rotate_method = "ring"',
                                                 "ulysses_anything = 1", "frob = true"])]
        elif k == "dup-axis":
            self.args += ["--mesh", "tp = 2, tp = 2"]
        elif k == "syntax":
            i = r.randrange(len(self.lines))
            ln = self.lines[i]
            if ";" in ln:
                self.lines[i] = ln.replace(";", "", 1)
            else:
                self.lines[i] = ln + " ]"
        elif k == "bad-shape":
            for i, ln in enumerate(self.lines):
                if "= linear(" in ln and "hidden)" in ln:
                    self.lines[i] = ln.replace("hidden)", "hidden + 1)", 1)
                    break

    def build(self):
        """Returns ({file name: text}, the file to check)."""
        self.model()
        model_end = len(self.lines)
        self.plan()
        if self.chance(0.25):
            self.args += ["-D", "seq=%d" % self.r.choice([4, 6, 8, 9, 12, 16])]
        if self.chance(0.15):
            self.mistake()
        model, plan = self.lines[:model_end], self.lines[model_end:]
        if self.chance(0.25):
            return {"m.plan": "\n".join(model) + "\n",
                    "p.plan": 'import "m.plan";\n' + "\n".join(plan) + "\n"}, "p.plan"
        return {"p.plan": "\n".join(model + plan) + "\n"}, "p.plan"


def sh_quote(a):
    return a if re.fullmatch(r"[A-Za-z0-9_./=-]+", a) else "'" + a.replace("'", "'\\''") + "'"


def run(cmd):
    """(status, output); status is -SIGNAL on a signal, None on a timeout."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        return None, (e.output or b"").decode(errors="replace")
    return p.returncode, p.stdout.decode(errors="replace")


def bad_status(rc, out, what):
    """Why a status is a failure of the property whatever the plan, or None."""
    if rc is None:
        return "%s timed out after %d s" % (what, TIMEOUT)
    if rc < 0:
        return "%s died of signal %d" % (what, -rc)
    if "internal error" in out:
        return "%s: internal error" % what
    if rc == 2:
        return "%s exited 2 (usage or I/O error) on a valid command line" % what
    if rc not in (0, 1):
        return "%s exited %d" % (what, rc)
    return None


def one(args, i, counts):
    """Generates, writes and tests case i in its own folder (cases run side
    by side). Returns None or (why, dir, commands, output); counts are the
    case's own."""
    case = Case(random.Random("%d/%d" % (args.seed, i)), args.known_bugs)
    files, main = case.build()
    opts = case.args
    d = os.path.join(args.out, "case", str(i))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as fh:
            fh.write(text)
    plan = os.path.join(d, main)
    graph = os.path.join(d, "p.graph")
    check = [args.dtpc, "check", plan, "--plan", "p", "--no-color"] + opts
    comp = [args.dtpc, plan, "--plan", "p"] + opts + ["-o", graph]
    replay = [args.dtpc, "run", graph, "--verify", "--seed", str(i), "--timeout", "60",
              "--allow-seeded", "--save-outputs", os.path.join(d, "out.safetensors")]
    counts["generated"] += 1
    rc, out = run(check)
    why = bad_status(rc, out, "check")
    if why:
        return why, d, [check], out
    if rc == 1:
        counts["refused"] += 1
        if not LOCATED.search(out):
            return "check refused the plan without a located error (FILE:LINE:COL: error:)", \
                d, [check], out
        rc, out = run(comp)
        why = bad_status(rc, out, "compile")
        if why:
            return why, d, [check, comp], out
        if rc != 1:
            return "check refused the plan, the compiler exited %d" % rc, d, [check, comp], out
        return None
    counts["accepted"] += 1
    rc, out = run(comp)
    if rc != 0:
        return "check accepted the plan, the compiler exited %s" % rc, d, [check, comp], out
    counts["runs"] += 1
    rc, out = run(replay)
    if rc != 0 or "verify:" not in out:
        return ("check accepted the plan, `dtpc run --verify` exited %s" % rc
                if rc is not None else "dtpc run timed out"), d, [check, comp, replay], out
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtpc", required=True)
    ap.add_argument("--out", required=True, help="a folder for the cases (kept on failure)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--only", type=int, help="only case I (to reproduce a failure)")
    ap.add_argument("--known-bugs", nargs="?", const=",".join(sorted(KNOWN_BUGS)), default="",
                    metavar="NAME,...",
                    help="also draw the shapes of these known bugs (default: all of them; "
                    "now: %s)" % (", ".join(sorted(KNOWN_BUGS)) or "none"))
    ap.add_argument("--keep", action="store_true", help="keep the last case's files")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="cases tested at a time (default: the machine's cores)")
    args = ap.parse_args()
    args.known_bugs = set(filter(None, args.known_bugs.split(",")))
    if args.known_bugs - KNOWN_BUGS:
        ap.error("not a known bug: " + ", ".join(sorted(args.known_bugs - KNOWN_BUGS)))
    os.makedirs(args.out, exist_ok=True)
    counts = dict(generated=0, accepted=0, refused=0, runs=0)
    failed = 0
    t0 = time.time()
    cases = [args.only] if args.only is not None else list(range(args.count))

    def test(i):
        own = dict.fromkeys(counts, 0)
        res = one(args, i, own)
        if res is None and not (args.keep and i == cases[-1]):
            shutil.rmtree(os.path.join(args.out, "case", str(i)), ignore_errors=True)
        return own, res

    shutil.rmtree(os.path.join(args.out, "case"), ignore_errors=True)
    # threads: each case's time is its dtpc processes'; map() yields in case order
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(test, cases))
    for i, (own, res) in zip(cases, results):
        for k in counts:
            counts[k] += own[k]
        if res is None:
            continue
        failed += 1
        why, d, cmds, out = res
        keep = os.path.join(args.out, "fail-%d-%d" % (args.seed, i))
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(d, keep)
        print("FAIL: prop case %d (seed %d): %s" % (i, args.seed, why))
        for c in cmds:
            c = [a.replace(d, keep) for a in c]
            print("  repro: " + " ".join(sh_quote(a) for a in c))
        print("  regenerate: python3 tests/prop/gen.py --dtpc %s --out %s --seed %d --only %d%s"
              % (args.dtpc, args.out, args.seed, i,
                 " --known-bugs=" + ",".join(sorted(args.known_bugs)) if args.known_bugs else ""))
        for ln in out.strip().splitlines()[:12]:
            print("  | " + ln)
    if not args.keep:
        shutil.rmtree(os.path.join(args.out, "case"), ignore_errors=True)
    print("prop: %d generated, %d accepted, %d refused, %d runs in %.0f s (seed %d%s)"
          % (counts["generated"], counts["accepted"], counts["refused"], counts["runs"],
             time.time() - t0, args.seed,
             ", known bugs drawn: " + ",".join(sorted(args.known_bugs)) if args.known_bugs else ""))
    print("prop: %d passed, %d failed, 0 skipped" % (counts["generated"] - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
