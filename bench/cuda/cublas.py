"""cuBLAS (through PyTorch) on the head's shape, for the README's batch-invariance price:
x @ W.T with W [262144, 2816] in bf16 (tensor cores, no fixed summation order) and in fp32
(TF32 off), median ms of CUDA-event-timed calls, for N in 1..64."""
import torch

vocab, hidden, iterations = 262144, 2816, 50
torch.backends.cuda.matmul.allow_tf32 = False
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
print("| dtype | " + " | ".join(f"N={n}" for n in (1, 2, 4, 8, 16, 32, 64)) + " |")
print("|---" * 8 + "|")
for dtype in (torch.bfloat16, torch.float32):
    w = torch.randn(vocab, hidden, device="cuda", dtype=dtype)
    cells = []
    for n in (1, 2, 4, 8, 16, 32, 64):
        x = torch.randn(n, hidden, device="cuda", dtype=dtype)
        for _ in range(5):
            x @ w.T
        times = []
        for _ in range(iterations):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            x @ w.T
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        cells.append(f"{times[len(times) // 2]:.3f}")
    print(f"| {str(dtype).removeprefix('torch.')} | " + " | ".join(cells) + " |")
    del w
