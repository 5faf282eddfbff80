"""Kernels written in Gluon (`triton.experimental.gluon`) for Hopper (sm_90): layouts, shared
buffers, mbarriers, asynchronous wgmma, TMA and warp specialization stated by the kernel itself.
They do not run under Triton's interpreter; `tritonkit.inspector.gluon.compile_sm90` builds them for sm_90 on any
machine, and the dispatch calls them only where their `supported` says so."""
