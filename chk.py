import time, torch
from reference.checks import check_d2t
from properties.cases.tensors import eagle3_d2t
torch.set_num_threads(1)
for V in (1000, 32000, 151936, 262144):
    d2t = eagle3_d2t(V, V + V // 3, torch.Generator().manual_seed(0))
    t = time.perf_counter()
    for _ in range(20): check_d2t(d2t, V)
    print(V, f"{(time.perf_counter()-t)/20*1e3:.2f} ms")
