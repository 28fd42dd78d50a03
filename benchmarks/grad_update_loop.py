"""TL313: per-parameter gradient updates in a Python loop against one multi-tensor call (`torch._foreach_mul_`), alternated, repeated (OMP_NUM_THREADS=1)."""
import statistics, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(50)])  # 100 parameter tensors
for p in model.parameters():
    p.grad = torch.randn_like(p)
params = list(model.parameters())

def loop_mul():
    for p in params:
        if p.grad is not None:
            p.grad *= 0.5

def foreach_mul():
    torch._foreach_mul_([p.grad for p in params if p.grad is not None], 0.5)

def timed(fn, n=20):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e3

for name, a, b in (("mul", loop_mul, foreach_mul),):
    ra, rb = [], []
    for i in range(30):  # alternated: each round times the loop, then the multi-tensor call
        ra.append(timed(a)); rb.append(timed(b))
    q = lambda r: statistics.quantiles(r, n=4)
    print(f"{name}: loop median {statistics.median(ra):.3f} ms (IQR {q(ra)[0]:.3f}-{q(ra)[2]:.3f}); foreach median {statistics.median(rb):.3f} ms (IQR {q(rb)[0]:.3f}-{q(rb)[2]:.3f}); ratio {statistics.median(ra)/statistics.median(rb):.2f}")
