#!/usr/bin/env python3
"""What NVRTC makes of the shared kernel source for an sm_90 GPU, without a GPU: registers,
spills and the instructions of each matvec's chunk loop, per head type and pass size.

A developer tool (not part of the test run) for tuning kernels.h before spending device time:
the H200 runs of bench/results/cuda-h200.md followed what it showed (16-bit loads and
codes four to a word took Q6_K from 20 to 11 instructions per weight). From the repository
root, after `zig build gpu-check`:

    python3 scripts/cuda_sass.py            # every head type
    python3 scripts/cuda_sass.py Q6_K Q4_K  # some

It downloads the pinned NVRTC, cuobjdump and nvdisasm wheels from PyPI into .tools/cuda once,
has `lmhead-gpu-check` compile every module (one per rows-per-pass size and kernel shape,
exactly as the CUDA backend does) and write each to a folder of its own (LMHEAD_CUBIN_DIR),
and disassembles them.
Instructions per weight = the instructions of the loop over chunks in a full pass, per chunk
(a scale table's refill counted once per table), / (vocab rows per warp × 8 values per
lane): what one lane issues per weight it decodes; at one row per pass an H200 stays at its
bandwidth floor only below about 4.5 (Q6_K) to 3 (Q4_K) (../shared/reference/gpu-probe.md).
"""
import collections
import os
import re
import subprocess
import sys
import zipfile

WHEELS = {  # pinned: name==version, and what each provides
    "nvidia-cuda-nvrtc==13.0.88": "nvidia/cu13/lib/libnvrtc.so.13",  # the H200 machine's NVRTC is 13.0
    "nvidia-cuda-cuobjdump==13.5.37": "nvidia/cu13/bin/cuobjdump",
    "nvidia-cuda-nvdisasm==13.5.37": "nvidia/cu13/bin/nvdisasm",  # cuobjdump runs it
}
TOOLS = os.path.join(".tools", "cuda")
CACHE = os.path.join(TOOLS, "cache")
CHECK = os.path.join("zig-out", "bin", "lmhead-gpu-check")


def fetch():
    """The pinned wheels, unpacked into .tools/cuda (once)."""
    paths = {}
    for spec, member in WHEELS.items():
        path = os.path.join(TOOLS, member)
        if not os.path.exists(path):
            download = os.path.join(TOOLS, "wheels")
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", download, spec], check=True)
            name = spec.split("==")[0].replace("-", "_")
            wheel = next(f for f in os.listdir(download) if f.startswith(name + "-"))
            with zipfile.ZipFile(os.path.join(download, wheel)) as z:
                z.extractall(TOOLS)
            os.chmod(path, 0o755)
        paths[spec] = path
    return list(paths.values())


def compile_modules(nvrtc):
    """The cubins of every module (a pass size and a kernel shape), in the order
    lmhead-gpu-check reports them, with the types each holds."""
    if not os.path.exists(CHECK):
        sys.exit(f"{CHECK} is missing: run `zig build gpu-check` first")
    cubins = os.path.join(CACHE, "modules")
    os.makedirs(cubins, exist_ok=True)
    for f in os.listdir(CACHE):
        if os.path.isfile(os.path.join(CACHE, f)):
            os.remove(os.path.join(CACHE, f))
    for f in os.listdir(cubins):
        os.remove(os.path.join(cubins, f))
    env = dict(os.environ, LMHEAD_NVRTC=os.path.abspath(nvrtc), LMHEAD_CACHE=os.path.abspath(CACHE), LMHEAD_CUBIN_DIR=os.path.abspath(cubins))
    out = subprocess.run([CHECK, "check"], env=env, capture_output=True, text=True)
    # "..., 8 rows per pass, 6 vocab rows per warp, 0 blocks per SM, 0 stages, 0 bulk stages (Q5_0 Q4_K): N bytes, written to PATH"
    # -> (rows, vocab rows, types), and the module lmhead-gpu-check wrote for it
    modules = []
    for l in (out.stdout + out.stderr).splitlines():
        m = re.search(r"(\d+) rows per pass, (\d+) vocab rows per warp, .*\(([\w ]+)\): \d+ bytes, written to (\S+)$", l)
        if m:
            modules.append(((int(m.group(1)), int(m.group(2)), m.group(3).split()), m.group(4)))
    if not modules or not all(os.path.exists(p) for _, p in modules):
        sys.exit("lmhead-gpu-check compiled no module, or wrote not every one:\n" + out.stdout + out.stderr)
    return modules


def instructions(cuobjdump, cubin, function):
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(cuobjdump)) + os.pathsep + os.environ.get("PATH", ""))
    text = subprocess.run([cuobjdump, "-sass", "-fun", function, cubin], env=env, capture_output=True, text=True, check=True).stdout
    return [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", text)]


def chunk_loop(code):
    """The innermost loop (a backward branch with no other inside it) with the most FFMAs: the
    loop over the chunks of a full pass; of a dense type's two, the one with 16-byte loads
    (rows of a multiple of 16 bytes, as every real head's)."""
    loops = []
    for address, text in code:
        m = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", text)
        if m and m.group(1) and int(m.group(1), 16) < address:
            loops.append((int(m.group(1), 16), address))
    best, best_range = [], (0, -1)
    for start, end in loops:
        if any(start <= s and e < end and (s, e) != (start, end) for s, e in loops):
            continue
        body = [t for a, t in code if start <= a <= end]
        # A branch back from the warp-divergence stubs NVRTC places past the function's last
        # EXIT spans it: not a loop of the kernel's own (Q4_K's and Q5_K's shuffles have such).
        if any(re.match(r"EXIT\b", t) for t in body):
            continue
        if key(body) > key(best):
            best, best_range = body, (start, end)
    return best, best_range


# Sub-blocks per chunk of the types with sub-block scales (a format fact). A chunk loop that
# keeps a scale table (kernels.h lmh_table_chunks; its lanes take their scales by indexed
# shuffle) refills it in a block it jumps over on the other chunks: that block counts once
# per table's 32 / S chunks.
SUB_BLOCKS = {"Q2_K": 16, "Q3_K": 16, "Q6_K": 16, "Q4_K": 8, "Q5_K": 8, "IQ4_XS": 8}


def issued_per_loop(code, body_range, sub_blocks):
    """Instructions the loop issues per iteration: every one of the loop's, but a scale table's
    refill (what a forward branch inside the loop jumps over) counts 1 / (32 / S)."""
    start, end = body_range
    body = [(a, t) for a, t in code if start <= a <= end]
    if not sub_blocks or not any("SHFL.IDX" in t for _, t in body):
        return len(body)
    skipped = set()
    for address, text in body:
        m = re.search(r"^@!?P\d\s+BRA\s+0x([0-9a-f]+)", text)
        if m and address < int(m.group(1), 16) <= end:
            skipped.update(a for a, _ in body if address < a < int(m.group(1), 16))
    return sum(sub_blocks / 32 if a in skipped else 1 for a, _ in body)


def key(body):
    return (sum(1 for t in body if "FFMA" in t), sum(1 for t in body if "LDG.E.128" in t))


def resources(cuobjdump, cubin):
    text = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True, text=True, check=True).stdout
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(r"Function (\w+):\s+REG:(\d+) STACK:\d+ SHARED:\d+ LOCAL:(\d+)", text)}


def main():
    types = sys.argv[1:] or ["F32", "F16", "Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "BF16"]
    nvrtc, cuobjdump, _ = fetch()
    print("| type | rows per pass | vocab rows per warp | registers | spilled bytes | chunk loop instructions | per weight decoded | top operations |")
    print("|---|---|---|---|---|---|---|---|")
    for (rows, vocab_rows, held), cubin in compile_modules(nvrtc):
        usage = resources(cuobjdump, cubin)
        for t in (t for t in types if t in held):
            # The head's entry point (its input is the norm's output), where the module has one.
            function = next(f for f in (f"matvec_{t}_normed_f32", f"matvec_{t}_f32") if f in usage)
            registers, local = usage[function]
            code = instructions(cuobjdump, cubin, function)
            body, body_range = chunk_loop(code)
            ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in body)
            # A loop may hold more than one chunk (LMH_CHUNKS_PER_STEP, or NVRTC's unrolling):
            # each chunk has one fma per weight and row, and one more where the decoder has a min.
            chunks = max(1, round(ops["FFMA"] / (vocab_rows * 8 * (rows + (t in ("Q2_K", "Q4_K", "Q5_K"))))))
            issued = issued_per_loop(code, body_range, SUB_BLOCKS.get(t)) / chunks
            top = ", ".join(f"{op} {n}" for op, n in ops.most_common(5))
            print(f"| {t} | {rows} | {vocab_rows} | {registers} | {local} | {len(body)} | {issued / (vocab_rows * 8):.1f} | {top} |")


if __name__ == "__main__":
    main()
