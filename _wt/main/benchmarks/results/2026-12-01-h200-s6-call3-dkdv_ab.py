# A/B of the Gluon dK/dV kernel: the committed one (.gpu/dkdv_orig.py) against the tree's, one process.
import importlib.util, sys, torch, triton
from tritonkit.gluon import attention_bwd as new
from tritonkit.ops.attention import attention_fwd
spec = importlib.util.spec_from_file_location("tritonkit.gluon.attention_bwd.dkdv_orig", ".gpu/dkdv_orig.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
SHAPES = [(4,32,32,4096,128,False,-1),(4,32,32,4096,128,True,-1),(4,32,32,16384,128,True,-1),(4,16,8,2048,128,True,-1),
          (1,16,8,8192,128,True,-1),(1,32,8,16384,128,True,1024),(8,16,16,1024,128,True,-1),(4,32,32,4096,64,True,-1),
          (4,32,32,4096,64,False,-1),(8,16,16,1024,64,True,-1)]
for B,H,Hkv,N,D,causal,W in SHAPES:
    torch.manual_seed(0)
    q = torch.randn(B,H,N,D,device="cuda",dtype=torch.bfloat16); k,v = (torch.randn(B,Hkv,N,D,device="cuda",dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q); o, lse = attention_fwd(q,k,v,causal,None,W)
    delta = (o.float()*do.float()).sum(-1)
    res, fns = {}, {}
    for name, kern in (("old", old._dkdv_kernel), ("new", new._dkdv_kernel)):
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        g,a,kw = new.dkdv_launch_args(do,q,k,v,dk,dv,lse,delta,causal,D**-0.5,0.0,W)
        kw = dict(kw); nw = kw.pop("num_warps")
        fn = lambda kern=kern,g=g,a=a,kw=kw,nw=nw: kern[g](*a, **kw, num_warps=nw)
        fn(); torch.cuda.synchronize(); res[name] = (dk.clone(), dv.clone()); fns[name] = fn
    same = all(torch.equal(x,y) for x,y in zip(res["old"],res["new"]))
    t = {n: [] for n in fns}
    for _ in range(3):
        for n, fn in fns.items():
            t[n].append(triton.testing.do_bench(fn, warmup=5, rep=40))
    best = {n: min(v) for n, v in t.items()}
    print(f"B{B} H{H}/{Hkv} N{N} D{D} causal={causal} window={W}: dkdv old {best['old']:.3f} ms  new {best['new']:.3f} ms"
          f"  new/old speed {best['old']/best['new']:.3f}  bitwise {same}", flush=True)
