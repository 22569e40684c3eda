"""What the lessons run: their modules and the kernels behind them, importable by name.

    models          the posts' modules (GeGLUMLP, the tiny LM of 06/07) and float32 references
    llama           08's Llama 3 decoder
    geglu/          the fused gate/up + GeGLU GEMM of 03_fused_mlp: shared parts, one file per
                    kernel (plain, hopper, hopper_epi, gluon), the launch and module (fused)
    triton_support  what every Triton kernel here needs: the interpreter's switches, the SM count
    decode_gemv, decode_attention   08's decode kernels
    quack_gemm      QuACK's gated GEMM, the yardstick of 03_fused_mlp --bench

A module here imports torch, Triton and the reader's names, never the lessons' plumbing in
common/: which kernel a lesson runs, and the one-line refusals, live in common/.
"""
