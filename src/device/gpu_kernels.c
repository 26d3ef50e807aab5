/*
 * device/gpu_kernels: the source of the GPU reduction kernels, compiled at
 * run time by NVRTC or hipRTC for the device at hand (gpu_reduce.c), and by
 * the host C compiler in a unit test that runs every kernel thread by thread
 * against hc_host_reduce / hc_host_scale.
 *
 * The arithmetic is host_reduce.c's, line for line, so the results are the
 * same bits: integers wrap (SUM and PROD in the unsigned type), fp16 / bf16 /
 * fp8 widen to float and round back to nearest even with bit manipulation
 * only (no cuda_fp16.h, nothing vendor-specific), fp8 saturates to its
 * largest finite value, NaN stays NaN, float MAX/MIN return the non-NaN
 * operand as fmaxf/fminf. The compile options (gpu_priv.h: rtc_options) keep
 * IEEE arithmetic: no FMA contraction, denormals kept, IEEE division.
 *
 * Only NaN *payloads* of float/double SUM and PROD may differ from the host:
 * an arithmetic NaN is the GPU's canonical NaN, the host's is the first
 * operand's. Every other bit is the host's.
 *
 * Source rules: the common subset of C11 and the C++ of NVRTC and hipRTC
 * (no headers, no templates, no hex float literals, unions for bit casts),
 * one logical line per macro (the C string below concatenates the pieces of
 * one macro without newlines).
 *
 * Kernels (extern "C", so unmangled):
 *   hc_reduce_<t>_<op>(void *dst, const void *src0, const void *src1, u64 n,
 *                      const volatile u64 *trap)
 *   hc_scale_<t>_<mul|div>(void *dst, const void *src, u64 n,
 *                          u64 u, double fd, float ff)
 *   hc_trap_if_set(const volatile u64 *word)
 *   hc_program_<t>_<op>(hc_program p)
 * with <t> one of i8 u8 i32 u32 i64 u64 f16 f32 f64 bf16 e4m3 e5m2 and
 * <op> sum prod max min. Scale arguments, prepared on the host
 * (gpu_reduce.c) as host_reduce.c computes them: u is the integer factor
 * (zero-extended bits) or integer divisor, ff / fd the float factor or
 * divisor. hc_trap_if_set traps (a sticky error of the context: every
 * later call of the process's driver fails) when *word, mapped host
 * memory, is not 0: a stream that the progress engine released after a
 * failure (exec/engine.c) fails there instead of completing. A reduction
 * given a trap word makes the same check first, so that a plan ending in a
 * reduction needs no launch of its own for it (exec/enqueue.c).
 * A program (device.h: hc_dev_program) is one block running a short list of
 * ops in order: copies, writes and waits of counters in mapped host memory,
 * reductions of its <t> and <op>, trap checks. Its threads share copies and
 * reductions; thread 0 writes and waits; the block fences at system scope
 * and joins after each copy, reduction and wait, so that a write publishes
 * everything before it and what follows a wait sees what the peer
 * published. The host emulation runs it as one thread.
 *
 * Work split: a grid-stride loop over 16-byte packs (16 / sizeof(T)
 * elements per thread and step) when the three pointers share their offset
 * modulo 16, after a scalar head up to the first 16-byte boundary; a scalar
 * grid-stride loop otherwise, and for the tail.
 */
#include <stdio.h>
#include <string.h>

#include "gpu_priv.h"

/* One line of the kernel source per line of C (HC_STR between pieces
 * would have clang-format align them all past the name). */
/* clang-format off */
const char hc_gpu_kernel_source[] =
    "/* hetccl reduction kernels (src/device/gpu_kernels.c) */\n"
    "#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__) || defined(__CUDACC__) || defined(__HIP__)\n"
    "#define HC_DEV static __device__ inline\n"
    "#define HC_KERNEL extern \"C\" __global__ void\n"
    "#define HC_TID ((hc_u64)blockIdx.x * blockDim.x + threadIdx.x)\n"
    "#define HC_NTHREADS ((hc_u64)gridDim.x * blockDim.x)\n"
    "#if defined(__HIPCC_RTC__) || defined(__HIP__)\n"
    "#define HC_TRAP() __builtin_trap()\n"
    "#else\n"
    "#define HC_TRAP() __trap()\n"
    "#endif\n"
    "#define HC_FENCE_SYSTEM() __threadfence_system()\n"
    "#define HC_BARRIER() __syncthreads()\n"
    "#define HC_BLOCK_TID ((hc_u64)threadIdx.x)\n"
    "#define HC_BLOCK_NTHREADS ((hc_u64)blockDim.x)\n"
    "#define HC_COUNTER_LOAD(p) (*(const volatile hc_u64 *)(p))\n"
    "#define HC_COUNTER_STORE(p, v) (*(volatile hc_u64 *)(p) = (v))\n"
    "#else\n"
    "/* Host emulation (tests): the caller runs each thread in turn, and sets\n"
    " * the hook that stands for a trap (a fake driver's sticky error). */\n"
    "#define HC_DEV static inline\n"
    "#define HC_KERNEL void\n"
    "unsigned long long hc_emu_tid, hc_emu_nthreads;\n"
    "void (*hc_emu_trap)(void);\n"
    "#define HC_TID hc_emu_tid\n"
    "#define HC_NTHREADS hc_emu_nthreads\n"
    "#define HC_TRAP() do { if (hc_emu_trap) hc_emu_trap(); } while (0)\n"
    "/* A program kernel runs as one thread here: a block barrier cannot be\n"
    " * honoured thread by thread. It reads no emulation globals, so that it\n"
    " * may wait for another stream's program while that one runs. */\n"
    "#define HC_FENCE_SYSTEM() __atomic_thread_fence(__ATOMIC_SEQ_CST)\n"
    "#define HC_BARRIER() ((void)0)\n"
    "#define HC_BLOCK_TID 0ull\n"
    "#define HC_BLOCK_NTHREADS 1ull\n"
    "/* Counters as the fake driver's stream operations touch them. */\n"
    "#define HC_COUNTER_LOAD(p) __atomic_load_n((const volatile hc_u64 *)(p), __ATOMIC_ACQUIRE)\n"
    "#define HC_COUNTER_STORE(p, v) __atomic_store_n((volatile hc_u64 *)(p), (v), __ATOMIC_RELEASE)\n"
    "#endif\n"
    "typedef unsigned char hc_u8;\n"
    "typedef signed char hc_i8;\n"
    "typedef unsigned short hc_u16;\n"
    "typedef unsigned int hc_u32;\n"
    "typedef int hc_i32;\n"
    "typedef unsigned long long hc_u64;\n"
    "typedef long long hc_i64;\n"
    "typedef struct __attribute__((aligned(16))) { hc_u32 w[4]; } hc_pack;\n"
    "\n"
    "/* ---- bit casts and rounding (host_reduce.c) ---- */\n"
    "HC_DEV hc_u32 hc_f2u(float f) { union { float f; hc_u32 u; } c; c.f = f; return c.u; }\n"
    "HC_DEV float hc_u2f(hc_u32 u) { union { float f; hc_u32 u; } c; c.u = u; return c.f; }\n"
    "HC_DEV hc_u32 hc_sel(hc_u32 c, hc_u32 x, hc_u32 y) { hc_u32 m = 0u - c; return (x & m) | (y & ~m); }\n"
    "HC_DEV hc_u32 hc_narrow_mag(hc_u32 a, hc_u32 m_bits, hc_u32 bias) {\n"
    "  hc_u32 drop = 23u - m_bits;\n"
    "  hc_u32 r = a - ((127u - bias) << 23);\n"
    "  hc_u32 normal = (r + (1u << (drop - 1)) - 1u + ((r >> drop) & 1u)) >> drop;\n"
    "  float magic = hc_u2f((151u - bias - m_bits) << 23);\n"
    "  hc_u32 sub = hc_f2u(hc_u2f(a) + magic) - hc_f2u(magic);\n"
    "  return hc_sel(a < ((128u - bias) << 23), sub, normal);\n"
    "}\n"
    "/* fp16: 1.5.10, bias 15 */\n"
    "HC_DEV float hc_h2f(hc_u16 h) {\n"
    "  hc_u32 sign = (hc_u32)(h & 0x8000u) << 16;\n"
    "  hc_u32 e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "  hc_u32 normal = ((e + 112u) << 23) | (m << 13);\n"
    "  hc_u32 special = 0x7f800000u | (m << 13);\n"
    "  hc_u32 sub = hc_f2u((float)(hc_i32)m * hc_u2f(103u << 23)); /* m * 2^-24 */\n"
    "  return hc_u2f(sign | hc_sel(e == 0, sub, hc_sel(e == 31, special, normal)));\n"
    "}\n"
    "HC_DEV hc_u16 hc_f2h(float f) {\n"
    "  hc_u32 u = hc_f2u(f), a = u & 0x7fffffffu;\n"
    "  hc_u32 mag = hc_narrow_mag(a, 10, 15);\n"
    "  mag = hc_sel(mag > 0x7c00u, 0x7c00u, mag);\n"
    "  mag = hc_sel(a > 0x7f800000u, 0x7e00u, mag);\n"
    "  return (hc_u16)(((u >> 16) & 0x8000u) | mag);\n"
    "}\n"
    "/* bf16: the top half of a float */\n"
    "HC_DEV float hc_bf2f(hc_u16 b) { return hc_u2f((hc_u32)b << 16); }\n"
    "HC_DEV hc_u16 hc_f2bf(float f) {\n"
    "  hc_u32 u = hc_f2u(f);\n"
    "  hc_u32 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
    "  hc_u32 nan = (u >> 16) | 0x40u;\n"
    "  return (hc_u16)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);\n"
    "}\n"
    "/* fp8 e4m3 (OCP e4m3fn): 1.4.3, bias 7, no inf, S.1111.111 is NaN */\n"
    "HC_DEV float hc_e4m3_2f(hc_u8 v) {\n"
    "  hc_u32 sign = (hc_u32)(v & 0x80u) << 24;\n"
    "  hc_u32 e = (v >> 3) & 0xfu, m = v & 7u;\n"
    "  hc_u32 normal = ((e + 120u) << 23) | (m << 20);\n"
    "  hc_u32 sub = hc_f2u((float)(hc_i32)m * hc_u2f(118u << 23)); /* m * 2^-9 */\n"
    "  return hc_u2f(sign | hc_sel((v & 0x7fu) == 0x7fu, 0x7fc00000u, hc_sel(e == 0, sub, normal)));\n"
    "}\n"
    "HC_DEV hc_u8 hc_f2e4m3(float f) {\n"
    "  hc_u32 u = hc_f2u(f), a = u & 0x7fffffffu;\n"
    "  hc_u32 mag = hc_narrow_mag(a, 3, 7);\n"
    "  mag = hc_sel(mag > 0x7eu, 0x7eu, mag);\n"
    "  mag = hc_sel(a > 0x7f800000u, 0x7fu, mag);\n"
    "  return (hc_u8)(((u >> 24) & 0x80u) | mag);\n"
    "}\n"
    "/* fp8 e5m2: 1.5.2, bias 15, the top byte of an fp16 */\n"
    "HC_DEV float hc_e5m2_2f(hc_u8 v) { return hc_h2f((hc_u16)(v << 8)); }\n"
    "HC_DEV hc_u8 hc_f2e5m2(float f) {\n"
    "  hc_u32 u = hc_f2u(f), a = u & 0x7fffffffu;\n"
    "  hc_u32 mag = hc_narrow_mag(a, 2, 15);\n"
    "  mag = hc_sel(mag > 0x7bu, 0x7bu, mag);\n"
    "  mag = hc_sel(a > 0x7f800000u, 0x7fu, mag);\n"
    "  return (hc_u8)(((u >> 24) & 0x80u) | mag);\n"
    "}\n"
    "/* fmaxf / fminf as the host computes them: a NaN operand yields the other. */\n"
    "HC_DEV float hc_fmaxf(float x, float y) { return (x > y || y != y) ? x : y; }\n"
    "HC_DEV float hc_fminf(float x, float y) { return (x < y || y != y) ? x : y; }\n"
    "HC_DEV double hc_fmaxd(double x, double y) { return (x > y || y != y) ? x : y; }\n"
    "HC_DEV double hc_fmind(double x, double y) { return (x < y || y != y) ? x : y; }\n"
    "\n"
    "/* Elements before the first 16-byte boundary when all pointers share their\n"
    " * offset modulo 16 (and it is a multiple of the element size); else n. */\n"
    "HC_DEV hc_u64 hc_head(const void *d, const void *a, const void *b, hc_u64 size, hc_u64 n) {\n"
    "  hc_u64 o = (hc_u64)d & 15u, h;\n"
    "  if (((hc_u64)a & 15u) != o || ((hc_u64)b & 15u) != o || o % size != 0) return n;\n"
    "  h = ((16u - o) & 15u) / size;\n"
    "  return h < n ? h : n;\n"
    "}\n"
    "\n"
    "/* ---- a plan as one kernel (exec/enqueue.c, device.h: hc_dev_program) ---- */\n"
    "#define HC_PROGRAM_OPS " HC_STR(HC_DEV_PROGRAM_OPS) "\n"
    "#define HC_PROGRAM_COPY " HC_STR(HC_DEV_PROGRAM_COPY) "\n"
    "#define HC_PROGRAM_WRITE " HC_STR(HC_DEV_PROGRAM_WRITE) "\n"
    "#define HC_PROGRAM_WAIT " HC_STR(HC_DEV_PROGRAM_WAIT) "\n"
    "#define HC_PROGRAM_REDUCE " HC_STR(HC_DEV_PROGRAM_REDUCE) "\n"
    "#define HC_PROGRAM_TRAP_CHECK " HC_STR(HC_DEV_PROGRAM_TRAP_CHECK) "\n"
    "#define HC_PROGRAM_WRITE_RELAXED " HC_STR(HC_DEV_PROGRAM_WRITE_RELAXED) "\n"
    "#define HC_PROGRAM_WRITES(kind) ((kind) == HC_PROGRAM_WRITE || (kind) == HC_PROGRAM_WRITE_RELAXED)\n"
    "typedef struct { hc_u64 kind, n; void *dst; const void *src0, *src1; } hc_program_op;\n"
    "typedef struct { hc_u64 nops; const volatile hc_u64 *trap; hc_program_op op[HC_PROGRAM_OPS]; } hc_program;\n"
    "HC_DEV void hc_copy_bytes(void *dst_, const void *src_, hc_u64 n, hc_u64 tid, hc_u64 nt) {\n"
    "  hc_u8 *dst = (hc_u8 *)dst_;\n"
    "  const hc_u8 *src = (const hc_u8 *)src_;\n"
    "  hc_u64 head = hc_head(dst_, src_, src_, 1, n), vn = (n - head) / 16, i;\n"
    "  const hc_pack *sp = (const hc_pack *)(src + head);\n"
    "  hc_pack *dp = (hc_pack *)(dst + head);\n"
    "  for (i = tid; i < head; i += nt) dst[i] = src[i];\n"
    "  for (i = tid; i < vn; i += nt) dp[i] = sp[i];\n"
    "  for (i = head + vn * 16 + tid; i < n; i += nt) dst[i] = src[i];\n"
    "}\n"
    "/* Every op but a reduction, which needs the kernel's types. A write and\n"
    " * a wait are thread 0's: a write after a system fence, so that it\n"
    " * publishes what the block wrote before it (the kernel fences and\n"
    " * joins the block after each copy, reduction and wait), a relaxed one\n"
    " * without (the next write's fence publishes it); a wait until the\n"
    " * counter reaches n under cuStreamWaitValue64's cyclic comparison, or\n"
    " * until the trap word is set (the engine, the wait's owner, gave up:\n"
    " * exec/engine.c). 0: the kernel trapped and must end. */\n"
    "HC_DEV int hc_program_step(const hc_program_op *o, const volatile hc_u64 *trap, hc_u64 tid, hc_u64 nt) {\n"
    "  if (o->kind == HC_PROGRAM_COPY) {\n"
    "    hc_copy_bytes(o->dst, o->src0, o->n, tid, nt);\n"
    "    return 1;\n"
    "  }\n"
    "  if (tid != 0) return 1;\n"
    "  if (HC_PROGRAM_WRITES(o->kind)) {\n"
    "    if (o->kind == HC_PROGRAM_WRITE) HC_FENCE_SYSTEM();\n"
    "    HC_COUNTER_STORE(o->dst, o->n);\n"
    "  } else if (o->kind == HC_PROGRAM_WAIT) {\n"
    "    while ((hc_i64)(HC_COUNTER_LOAD(o->src0) - o->n) < 0)\n"
    "      if (HC_COUNTER_LOAD(trap) != 0) {\n"
    "        HC_TRAP();\n"
    "        return 0;\n"
    "      }\n"
    "  } else if (o->kind == HC_PROGRAM_TRAP_CHECK && HC_COUNTER_LOAD(trap) != 0) {\n"
    "    HC_TRAP();\n"
    "    return 0;\n"
    "  }\n"
    "  return 1;\n"
    "}\n"
    "\n"
    "#define HC_ID(x) (x)\n"
    "#define HC_SUM(x, y) ((x) + (y))\n"
    "#define HC_PROD(x, y) ((x) * (y))\n"
    "#define HC_IMAX(x, y) ((x) > (y) ? (x) : (y))\n"
    "#define HC_IMIN(x, y) ((x) < (y) ? (x) : (y))\n"
    "\n"
    "/* T: storage type; CT: compute type; LOAD: T -> CT; STORE: CT -> T. The\n"
    " * body is shared by the reduction kernel and the program kernel. */\n"
    "#define HC_REDUCE(TAG, OPN, T, CT, LOAD, OP, STORE) "
    "HC_DEV void hc_reduce_body_##TAG##_##OPN(void *dst_, const void *src0_, const void *src1_, hc_u64 n, "
    "                                         hc_u64 tid, hc_u64 nt) { "
    "  T *dst = (T *)dst_; "
    "  const T *a = (const T *)src0_, *b = (const T *)src1_; "
    "  hc_u64 i, v; "
    "  hc_u64 head = hc_head(dst_, src0_, src1_, sizeof(T), n); "
    "  hc_u64 vn = (n - head) / (16 / sizeof(T)); "
    "  const hc_pack *ap = (const hc_pack *)(a + head), *bp = (const hc_pack *)(b + head); "
    "  hc_pack *dp = (hc_pack *)(dst + head); "
    "  for (i = tid; i < head; i += nt) { "
    "    CT x = LOAD(a[i]), y = LOAD(b[i]); "
    "    dst[i] = (T)STORE(OP(x, y)); "
    "  } "
    "  for (v = tid; v < vn; v += nt) { "
    "    union { hc_pack p; T e[16 / sizeof(T)]; } x, y; "
    "    int k; "
    "    x.p = ap[v]; "
    "    y.p = bp[v]; "
    "    for (k = 0; k < (int)(16 / sizeof(T)); k++) { "
    "      CT xe = LOAD(x.e[k]), ye = LOAD(y.e[k]); "
    "      x.e[k] = (T)STORE(OP(xe, ye)); "
    "    } "
    "    dp[v] = x.p; "
    "  } "
    "  for (i = head + vn * (16 / sizeof(T)) + tid; i < n; i += nt) { "
    "    CT x = LOAD(a[i]), y = LOAD(b[i]); "
    "    dst[i] = (T)STORE(OP(x, y)); "
    "  } "
    "} "
    "HC_KERNEL hc_reduce_##TAG##_##OPN(void *dst_, const void *src0_, const void *src1_, hc_u64 n, "
    "                                  const volatile hc_u64 *trap) { "
    "  if (trap && HC_TID == 0 && *trap != 0) HC_TRAP(); "
    "  hc_reduce_body_##TAG##_##OPN(dst_, src0_, src1_, n, HC_TID, HC_NTHREADS); "
    "} "
    "HC_KERNEL hc_program_##TAG##_##OPN(hc_program p) { "
    "  hc_u64 tid = HC_BLOCK_TID, nt = HC_BLOCK_NTHREADS, k; "
    "  for (k = 0; k < p.nops && k < HC_PROGRAM_OPS; k++) { "
    "    hc_program_op o = p.op[k]; "
    "    if (o.kind == HC_PROGRAM_REDUCE) hc_reduce_body_##TAG##_##OPN(o.dst, o.src0, o.src1, o.n, tid, nt); "
    "    else if (!hc_program_step(&o, p.trap, tid, nt)) return; "
    "    if (!HC_PROGRAM_WRITES(o.kind) && o.kind != HC_PROGRAM_TRAP_CHECK) { "
    "      HC_FENCE_SYSTEM(); "
    "      HC_BARRIER(); "
    "    } "
    "  } "
    "}\n"
    "/* Integers: SUM and PROD in the unsigned type (wrap), MAX and MIN signed. */\n"
    "#define HC_REDUCE_INT(tag, ST, UT) "
    "HC_REDUCE(tag, sum, UT, UT, HC_ID, HC_SUM, HC_ID) "
    "HC_REDUCE(tag, prod, UT, UT, HC_ID, HC_PROD, HC_ID) "
    "HC_REDUCE(tag, max, ST, ST, HC_ID, HC_IMAX, HC_ID) "
    "HC_REDUCE(tag, min, ST, ST, HC_ID, HC_IMIN, HC_ID)\n"
    "#define HC_REDUCE_FLOAT(tag, T, CT, LOAD, STORE, FMAX, FMIN) "
    "HC_REDUCE(tag, sum, T, CT, LOAD, HC_SUM, STORE) "
    "HC_REDUCE(tag, prod, T, CT, LOAD, HC_PROD, STORE) "
    "HC_REDUCE(tag, max, T, CT, LOAD, FMAX, STORE) "
    "HC_REDUCE(tag, min, T, CT, LOAD, FMIN, STORE)\n"
    "HC_REDUCE_INT(i8, hc_i8, hc_u8)\n"
    "HC_REDUCE_INT(u8, hc_u8, hc_u8)\n"
    "HC_REDUCE_INT(i32, hc_i32, hc_u32)\n"
    "HC_REDUCE_INT(u32, hc_u32, hc_u32)\n"
    "HC_REDUCE_INT(i64, hc_i64, hc_u64)\n"
    "HC_REDUCE_INT(u64, hc_u64, hc_u64)\n"
    "HC_REDUCE_FLOAT(f16, hc_u16, float, hc_h2f, hc_f2h, hc_fmaxf, hc_fminf)\n"
    "HC_REDUCE_FLOAT(f32, float, float, HC_ID, HC_ID, hc_fmaxf, hc_fminf)\n"
    "HC_REDUCE_FLOAT(f64, double, double, HC_ID, HC_ID, hc_fmaxd, hc_fmind)\n"
    "HC_REDUCE_FLOAT(bf16, hc_u16, float, hc_bf2f, hc_f2bf, hc_fmaxf, hc_fminf)\n"
    "HC_REDUCE_FLOAT(e4m3, hc_u8, float, hc_e4m3_2f, hc_f2e4m3, hc_fmaxf, hc_fminf)\n"
    "HC_REDUCE_FLOAT(e5m2, hc_u8, float, hc_e5m2_2f, hc_f2e5m2, hc_fmaxf, hc_fminf)\n"
    "\n"
    "/* dst[i] = EXPR(src[i]); EXPR sees the arguments u, fd and ff. */\n"
    "#define HC_SCALE(NAME, T, EXPR) "
    "HC_KERNEL NAME(void *dst_, const void *src_, hc_u64 n, hc_u64 u, double fd, float ff) { "
    "  T *dst = (T *)dst_; "
    "  const T *a = (const T *)src_; "
    "  hc_u64 tid = HC_TID, nt = HC_NTHREADS, i, v; "
    "  hc_u64 head = hc_head(dst_, src_, src_, sizeof(T), n); "
    "  hc_u64 vn = (n - head) / (16 / sizeof(T)); "
    "  const hc_pack *ap = (const hc_pack *)(a + head); "
    "  hc_pack *dp = (hc_pack *)(dst + head); "
    "  (void)u; (void)fd; (void)ff; "
    "  for (i = tid; i < head; i += nt) dst[i] = EXPR(a[i]); "
    "  for (v = tid; v < vn; v += nt) { "
    "    union { hc_pack p; T e[16 / sizeof(T)]; } x; "
    "    int k; "
    "    x.p = ap[v]; "
    "    for (k = 0; k < (int)(16 / sizeof(T)); k++) x.e[k] = EXPR(x.e[k]); "
    "    dp[v] = x.p; "
    "  } "
    "  for (i = head + vn * (16 / sizeof(T)) + tid; i < n; i += nt) dst[i] = EXPR(a[i]); "
    "}\n"
    "/* Multiply: integers wrap in the unsigned type of their width (u8 in u32). */\n"
    "#define HC_MUL_U8(x) ((hc_u8)((hc_u32)(x) * (hc_u32)u))\n"
    "#define HC_MUL_U32(x) ((hc_u32)((x) * (hc_u32)u))\n"
    "#define HC_MUL_U64(x) ((x) * u)\n"
    "#define HC_MUL_F16(x) hc_f2h(hc_h2f(x) * ff)\n"
    "#define HC_MUL_F32(x) ((x) * ff)\n"
    "#define HC_MUL_F64(x) ((x) * fd)\n"
    "#define HC_MUL_BF16(x) hc_f2bf(hc_bf2f(x) * ff)\n"
    "#define HC_MUL_E4M3(x) hc_f2e4m3(hc_e4m3_2f(x) * ff)\n"
    "#define HC_MUL_E5M2(x) hc_f2e5m2(hc_e5m2_2f(x) * ff)\n"
    "/* Divide: integer quotients truncate; narrow signed types divide in int64\n"
    " * by u, which the host clamped to INT64_MAX; int64 by a divisor of 2^63 or\n"
    " * more is 0 except INT64_MIN / 2^63 = -1. Floats divide by ff / fd. */\n"
    "#define HC_I64_MIN (-0x7fffffffffffffffll - 1)\n"
    "#define HC_DIV_S(T, x) ((T)((hc_i64)(x) / (hc_i64)u))\n"
    "#define HC_DIV_I8(x) HC_DIV_S(hc_i8, x)\n"
    "#define HC_DIV_I32(x) HC_DIV_S(hc_i32, x)\n"
    "#define HC_DIV_U8(x) ((hc_u8)((hc_u64)(x) / u))\n"
    "#define HC_DIV_U32(x) ((hc_u32)((hc_u64)(x) / u))\n"
    "#define HC_DIV_I64(x) (u > 0x7fffffffffffffffull "
    "? ((x) == HC_I64_MIN && u == 0x8000000000000000ull ? (hc_i64)-1 : (hc_i64)0) "
    ": (x) / (hc_i64)u)\n"
    "#define HC_DIV_U64(x) ((x) / u)\n"
    "#define HC_DIV_F16(x) hc_f2h(hc_h2f(x) / ff)\n"
    "#define HC_DIV_F32(x) ((x) / ff)\n"
    "#define HC_DIV_F64(x) ((x) / fd)\n"
    "#define HC_DIV_BF16(x) hc_f2bf(hc_bf2f(x) / ff)\n"
    "#define HC_DIV_E4M3(x) hc_f2e4m3(hc_e4m3_2f(x) / ff)\n"
    "#define HC_DIV_E5M2(x) hc_f2e5m2(hc_e5m2_2f(x) / ff)\n"
    "HC_SCALE(hc_scale_i8_mul, hc_u8, HC_MUL_U8)\n"
    "HC_SCALE(hc_scale_u8_mul, hc_u8, HC_MUL_U8)\n"
    "HC_SCALE(hc_scale_i32_mul, hc_u32, HC_MUL_U32)\n"
    "HC_SCALE(hc_scale_u32_mul, hc_u32, HC_MUL_U32)\n"
    "HC_SCALE(hc_scale_i64_mul, hc_u64, HC_MUL_U64)\n"
    "HC_SCALE(hc_scale_u64_mul, hc_u64, HC_MUL_U64)\n"
    "HC_SCALE(hc_scale_f16_mul, hc_u16, HC_MUL_F16)\n"
    "HC_SCALE(hc_scale_f32_mul, float, HC_MUL_F32)\n"
    "HC_SCALE(hc_scale_f64_mul, double, HC_MUL_F64)\n"
    "HC_SCALE(hc_scale_bf16_mul, hc_u16, HC_MUL_BF16)\n"
    "HC_SCALE(hc_scale_e4m3_mul, hc_u8, HC_MUL_E4M3)\n"
    "HC_SCALE(hc_scale_e5m2_mul, hc_u8, HC_MUL_E5M2)\n"
    "HC_SCALE(hc_scale_i8_div, hc_i8, HC_DIV_I8)\n"
    "HC_SCALE(hc_scale_u8_div, hc_u8, HC_DIV_U8)\n"
    "HC_SCALE(hc_scale_i32_div, hc_i32, HC_DIV_I32)\n"
    "HC_SCALE(hc_scale_u32_div, hc_u32, HC_DIV_U32)\n"
    "HC_SCALE(hc_scale_i64_div, hc_i64, HC_DIV_I64)\n"
    "HC_SCALE(hc_scale_u64_div, hc_u64, HC_DIV_U64)\n"
    "HC_SCALE(hc_scale_f16_div, hc_u16, HC_DIV_F16)\n"
    "HC_SCALE(hc_scale_f32_div, float, HC_DIV_F32)\n"
    "HC_SCALE(hc_scale_f64_div, double, HC_DIV_F64)\n"
    "HC_SCALE(hc_scale_bf16_div, hc_u16, HC_DIV_BF16)\n"
    "HC_SCALE(hc_scale_e4m3_div, hc_u8, HC_DIV_E4M3)\n"
    "HC_SCALE(hc_scale_e5m2_div, hc_u8, HC_DIV_E5M2)\n"
    "\n"
    "/* ---- the end of a GPU plan (exec/enqueue.c) ---- */\n"
    "HC_KERNEL hc_trap_if_set(const volatile hc_u64 *word) {\n"
    "  if (HC_TID == 0 && *word != 0) HC_TRAP();\n"
    "}\n";
/* clang-format on */

static const char *const dtype_tags[HC_DTYPE_COUNT] = {
    [HC_INT8] = "i8",     [HC_UINT8] = "u8",      [HC_INT32] = "i32",     [HC_UINT32] = "u32",
    [HC_INT64] = "i64",   [HC_UINT64] = "u64",    [HC_FLOAT16] = "f16",   [HC_FLOAT32] = "f32",
    [HC_FLOAT64] = "f64", [HC_BFLOAT16] = "bf16", [HC_FP8_E4M3] = "e4m3", [HC_FP8_E5M2] = "e5m2",
};

void hc_gpu_kernel_name(char *buf, size_t n, bool scale, enum hc_dtype t, int op) {
  static const char *const reduce_ops[] = {"sum", "prod", "max", "min"};
  static const char *const scale_ops[] = {"mul", "div"};
  const char *tag = (unsigned)t < HC_DTYPE_COUNT ? dtype_tags[t] : "?";
  const char *o = scale ? ((unsigned)op < 2 ? scale_ops[op] : "?") : ((unsigned)op < 4 ? reduce_ops[op] : "?");
  snprintf(buf, n, "hc_%s_%s_%s", scale ? "scale" : "reduce", tag, o);
}

void hc_gpu_program_kernel_name(char *buf, size_t n, enum hc_dtype t, int op) {
  char reduce[64];
  hc_gpu_kernel_name(reduce, sizeof(reduce), false, t, op);
  snprintf(buf, n, "hc_program_%s", reduce + strlen("hc_reduce_"));
}
