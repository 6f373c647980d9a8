"""Compile every compressors/cuda program with NVRTC (the compiler CuPy uses) by ctypes, no GPU."""
import ctypes, glob, sys, time
from compressors.cuda import build
lib = ctypes.CDLL(sys.argv[1])
major, minor = ctypes.c_int(), ctypes.c_int(); lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
print("NVRTC", major.value, minor.value)
for arch in ("sm_90", "sm_80"):
    for m in build.methods():
        prog = ctypes.c_void_p()
        src = build.source(m).encode()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, f"{m}.cu".encode(), 0, None, None)
        opts = [o.encode() for o in (*build.OPTIONS, f"-arch={arch}")]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        t = time.time(); rc = lib.nvrtcCompileProgram(prog, len(opts), arr); dt = time.time() - t
        size = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value); lib.nvrtcGetProgramLog(prog, log)
        cub = ctypes.c_size_t(); lib.nvrtcGetCUBINSize(prog, ctypes.byref(cub))
        print(f"{arch} {m:8} rc={rc} cubin={cub.value} bytes {dt:.1f}s", log.value.decode().strip()[:500])
