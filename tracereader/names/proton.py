"""The scopes that the fused GeGLU kernels time with Proton (03_fused_mlp.py --proton), by the
names the kernels give them: modules/geglu/gluon.py's producer and consumer waits, the hopper
kernel's main loop and epilogue. The kernels take these names from here; the reader's Proton
analysis (analyses/proton.py) reads them back."""

# modules/geglu/gluon.py's kernel: a producer warp waits for a free slot of the ring, consumer
# warps wait for data and run their epilogue.
SLOT = "producer waits for a free slot"
DATA = "consumer waits for data"
EPILOGUE = "consumer epilogue"
# modules/geglu/hopper.py's kernel (--proton --kernel hopper): every warp runs a tile's main loop
# (loads and wgmma interleaved by the compiler: no wait of its own to time), then its epilogue;
# no other warpgroup computes meanwhile.
MAIN_LOOP = "main loop"
PLAIN_EPILOGUE = "epilogue"
SCOPES = (SLOT, DATA, EPILOGUE, MAIN_LOOP, PLAIN_EPILOGUE)
