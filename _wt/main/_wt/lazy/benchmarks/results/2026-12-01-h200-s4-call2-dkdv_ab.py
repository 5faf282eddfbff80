# A/B of the Gluon dK/dV kernel: the committed one (.gpu/attention_bwd_orig.py) against the tree's.
import importlib.util, sys, torch, triton
from tritonkit.gluon import attention_bwd as new
from tritonkit.ops.attention import attention_fwd
spec = importlib.util.spec_from_file_location("tritonkit.gluon.attention_bwd_orig", ".gpu/attention_bwd_orig.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
SHAPES = [(4,32,32,4096,128,False),(4,32,32,4096,128,True),(4,32,32,16384,128,True),(4,16,8,2048,128,True),
          (1,16,8,8192,128,True),(4,32,32,4096,64,True),(4,32,32,4096,64,False)]
for B,H,Hkv,N,D,causal in SHAPES:
    torch.manual_seed(0)
    q = torch.randn(B,H,N,D,device="cuda",dtype=torch.bfloat16); k,v = (torch.randn(B,Hkv,N,D,device="cuda",dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q); o, lse = attention_fwd(q,k,v,causal)
    delta = (o.float()*do.float()).sum(-1)
    res = {}
    fns = {}
    for name, m in (("old", old), ("new", new)):
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        g,a,kw = m.dkdv_launch_args(do,q,k,v,dk,dv,lse,delta,causal,D**-0.5)
        kw = dict(kw); nw = kw.pop("num_warps")
        fn = lambda m=m,g=g,a=a,kw=kw,nw=nw: m._dkdv_kernel[g](*a, **kw, num_warps=nw)
        fn(); torch.cuda.synchronize(); res[name] = (dk.clone(), dv.clone()); fns[name] = fn
    same = all(torch.equal(x,y) for x,y in zip(res["old"],res["new"]))
    flops = 8*B*H*N*N*D*(0.5 if causal else 1)  # 4 products of 2*N*N*D a head
    t = {n: [] for n in fns}
    for _ in range(3):
        for n, fn in fns.items():
            t[n].append(triton.testing.do_bench(fn, warmup=5, rep=30))
    best = {n: min(v) for n, v in t.items()}
    print(f"B{B} H{H}/{Hkv} N{N} D{D} causal={causal}: dkdv old {best['old']:.3f} ms ({flops/best['old']/1e9:.0f} TFLOP/s)"
          f"  new {best['new']:.3f} ms ({flops/best['new']/1e9:.0f})  new/old speed {best['old']/best['new']:.3f}  bitwise {same}", flush=True)
