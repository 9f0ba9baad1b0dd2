// Block-level GEMM on mma.sync tensor cores (sm_80+): C (registers) += A @ B.
//
// The block's warps form a WARPS_M x WARPS_N grid; warp (wm, wn) owns the C sub-tile of rows
// wm*WM .. and columns wn*WN .. (WM = M / WARPS_M, WN = N / WARPS_N), held as
// MI x NI m16n8 accumulators: register (mi*NI + ni)*4 + h*2 + c of lane l is row
// 16*mi + 8*h + l/4, column 8*ni + 2*(l%4) + c of that sub-tile
// (tilelang.layout.fragment.mma_accumulator describes the same map).
//
// Operands in shared memory are row-major tiles laid out by tl::Tile (optionally swizzled):
// A is M x K (K x M when TRANS_A), B is K x N (N x K when TRANS_B). Every mma consumes 32
// bytes of K: m16n8k16 for f16/bf16, m16n8k32 for int8, m16n8k8 for tf32. Fragments are read
// with ldmatrix where its 16-bit transposition fits, else gathered element by element.
#pragma once
#include "common.h"

namespace tl {

template <typename T> struct MmaTraits;
template <> struct MmaTraits<half> {
  static constexpr int kStep = 16, kEPW = 2;
  static constexpr bool kLdmatrixTrans = true;
};
template <> struct MmaTraits<__nv_bfloat16> {
  static constexpr int kStep = 16, kEPW = 2;
  static constexpr bool kLdmatrixTrans = true;
};
template <> struct MmaTraits<int8_t> {
  static constexpr int kStep = 32, kEPW = 4;
  static constexpr bool kLdmatrixTrans = false;
};
template <> struct MmaTraits<float> {  // tf32
  static constexpr int kStep = 8, kEPW = 1;
  static constexpr bool kLdmatrixTrans = false;
};

TL_DEVICE void ldmatrix_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
TL_DEVICE void ldmatrix_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
TL_DEVICE void ldmatrix_x2(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}
TL_DEVICE void ldmatrix_x2_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}

template <typename T> TL_DEVICE void mma(float* c, const uint32_t* a, const uint32_t* b);
template <> TL_DEVICE void mma<half>(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> TL_DEVICE void mma<__nv_bfloat16>(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> TL_DEVICE void mma<float>(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
TL_DEVICE void mma_s8(int* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// f16 accumulators: the four halves sit where the f32 variant's four floats do, two to a
// register (c0 c1 | c2 c3).
TL_DEVICE void mma_f16_acc(half* c, const uint32_t* a, const uint32_t* b) {
  uint32_t d[2];
  memcpy(d, c, sizeof(d));
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
      "{%0,%1};\n"
      : "+r"(d[0]), "+r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  memcpy(c, d, sizeof(d));
}
template <typename T, typename C>
TL_DEVICE void mma_any(C* c, const uint32_t* a, const uint32_t* b) {
  if constexpr (std::is_same_v<C, half>) {
    static_assert(std::is_same_v<T, half>, "f16 accumulators take f16 operands");
    mma_f16_acc(c, a, b);
  } else if constexpr (sizeof(T) == 1) {
    mma_s8(reinterpret_cast<int*>(c), a, b);
  } else {
    mma<T>(reinterpret_cast<float*>(c), a, b);
  }
}

template <typename T> TL_DEVICE uint32_t to_word_bits(T v);
template <> TL_DEVICE uint32_t to_word_bits<float>(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

// Pack EPW elements of T (gathered from shared memory) into one 32-bit register.
template <typename T, int EPW, typename Load>
TL_DEVICE uint32_t gather_word(Load load) {
  if constexpr (EPW == 1) {
    return to_word_bits<T>(load(0));
  } else {
    uint32_t w = 0;
#pragma unroll
    for (int e = 0; e < EPW; ++e) {
      T v = load(e);
      uint32_t bits;
      if constexpr (sizeof(T) == 2) {
        bits = *reinterpret_cast<const uint16_t*>(&v);
      } else {
        bits = static_cast<uint8_t>(v);
      }
      w |= bits << (e * 8 * sizeof(T));
    }
    return w;
  }
}

// The A fragment (4 registers) of the 16 x kStep tile at rows m0.., columns k0.. of op(A).
template <typename T, bool TRANS, int ROW, bool SWZ>
TL_DEVICE void load_a(uint32_t* a, const T* A, int m0, int k0, int lane) {
  using Tr = MmaTraits<T>;
  using L = Tile<ROW, sizeof(T), SWZ>;
  if constexpr (!TRANS) {
    int row = m0 + (lane % 16), col = k0 + (lane / 16) * (Tr::kStep / 2);
    ldmatrix_x4(a, A + L::offset(row, col));
  } else if constexpr (Tr::kLdmatrixTrans) {
    int row = k0 + (lane % 8) + 8 * (lane / 16), col = m0 + ((lane / 8) % 2) * 8;
    ldmatrix_x4_trans(a, A + L::offset(row, col));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int m = m0 + lane / 4 + 8 * (j % 2);
      int kb = k0 + (j / 2) * (Tr::kStep / 2) + (lane % 4) * Tr::kEPW;
      a[j] = gather_word<T, Tr::kEPW>([&](int e) { return A[L::offset(kb + e, m)]; });
    }
  }
}

// B fragments (2 registers each) of n-tiles n0 and n0+8 (when PAIR) at K rows k0.. of op(B).
template <typename T, bool TRANS, int ROW, bool SWZ, bool PAIR>
TL_DEVICE void load_b(uint32_t* b0, uint32_t* b1, const T* B, int n0, int k0, int lane) {
  using Tr = MmaTraits<T>;
  using L = Tile<ROW, sizeof(T), SWZ>;
  if constexpr (TRANS) {  // stored N x K: ldmatrix gives the col-major fragment directly
    if constexpr (PAIR) {
      uint32_t r[4];
      int row = n0 + (lane % 8) + 8 * (lane / 16), col = k0 + ((lane / 8) % 2) * (Tr::kStep / 2);
      ldmatrix_x4(r, B + L::offset(row, col));
      b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
    } else {
      int row = n0 + (lane % 8), col = k0 + ((lane / 8) % 2) * (Tr::kStep / 2);
      ldmatrix_x2(b0, B + L::offset(row, col));
    }
  } else if constexpr (Tr::kLdmatrixTrans) {  // stored K x N, 16-bit: transpose on load
    if constexpr (PAIR) {
      uint32_t r[4];
      int row = k0 + (lane % 8) + 8 * ((lane / 8) % 2), col = n0 + (lane / 16) * 8;
      ldmatrix_x4_trans(r, B + L::offset(row, col));
      b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
    } else {
      int row = k0 + (lane % 8) + 8 * ((lane / 8) % 2), col = n0;
      ldmatrix_x2_trans(b0, B + L::offset(row, col));
    }
  } else {
#pragma unroll
    for (int p = 0; p < (PAIR ? 2 : 1); ++p) {
      uint32_t* b = p ? b1 : b0;
      int n = n0 + 8 * p + lane / 4;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        int kb = k0 + j * (Tr::kStep / 2) + (lane % 4) * Tr::kEPW;
        b[j] = gather_word<T, Tr::kEPW>([&](int e) { return B[L::offset(kb + e, n)]; });
      }
    }
  }
}

// The A and B fragments of one K step of a warp's tile.
template <typename T, bool TRANS_A, bool TRANS_B, int A_ROW, int B_ROW, bool A_SWZ, bool B_SWZ,
          int MI, int NI>
TL_DEVICE void load_step(uint32_t (&a)[MI][4], uint32_t (&b)[NI][2], const T* A, const T* B,
                         int m_base, int n_base, int k0, int lane) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    load_a<T, TRANS_A, A_ROW, A_SWZ>(a[mi], A, m_base + mi * 16, k0, lane);
  }
#pragma unroll
  for (int ni = 0; ni + 1 < NI; ni += 2) {
    load_b<T, TRANS_B, B_ROW, B_SWZ, true>(b[ni], b[ni + 1], B, n_base + ni * 8, k0, lane);
  }
  if constexpr (NI % 2 == 1) {
    load_b<T, TRANS_B, B_ROW, B_SWZ, false>(b[NI - 1], b[NI - 1], B, n_base + (NI - 1) * 8, k0,
                                           lane);
  }
}

// THREAD_OFFSET: first thread of the thread group that runs the gemm (warp w of the grid is
// warp THREAD_OFFSET / 32 + w of the block).
template <int M, int N, int K, int WARPS_M, int WARPS_N, bool TRANS_A, bool TRANS_B,
          int A_ROW, int B_ROW, bool A_SWZ, bool B_SWZ, typename T, typename C,
          int THREAD_OFFSET = 0>
TL_DEVICE void gemm_ss(const T* A, const T* B, C* acc) {
  using Tr = MmaTraits<T>;
  constexpr int WM = M / WARPS_M, WN = N / WARPS_N, MI = WM / 16, NI = WN / 8;
  constexpr int STEPS = K / Tr::kStep;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % Tr::kStep == 0, "gemm tile shape");
  const int warp = (threadIdx.x - THREAD_OFFSET) / 32, lane = threadIdx.x % 32;
  const int m_base = (warp / WARPS_N) * WM, n_base = (warp % WARPS_N) * WN;
  // Fragments are double-buffered: step s+1 is read from shared memory while step s runs.
  uint32_t a[2][MI][4];
  uint32_t b[2][NI][2];
  load_step<T, TRANS_A, TRANS_B, A_ROW, B_ROW, A_SWZ, B_SWZ, MI, NI>(a[0], b[0], A, B, m_base,
                                                                     n_base, 0, lane);
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    if (s + 1 < STEPS) {
      load_step<T, TRANS_A, TRANS_B, A_ROW, B_ROW, A_SWZ, B_SWZ, MI, NI>(
          a[(s + 1) % 2], b[(s + 1) % 2], A, B, m_base, n_base, (s + 1) * Tr::kStep, lane);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        mma_any<T>(acc + (mi * NI + ni) * 4, a[s % 2][mi], b[s % 2][ni]);
      }
    }
  }
}

// A from registers: the M x K tile A_regs is laid out as tilelang.ops.gemm.operand_layout
// gives for a WARPS_M x 1 warp grid: each K step of an m16 block is an mma A fragment as it
// stands. 16-bit: the accumulator layout (what a first gemm produces and a cast copy keeps),
// register pairs of two n8 tiles being the four A words; int8: four words of four bytes,
// (g, 4t..), (g+8, 4t..), (g, 16+4t..), (g+8, 16+4t..); tf32 (float): registers (g, t),
// (g, t+4), (g+8, t), (g+8, t+4), rounded to tf32 as the shared path rounds them.
template <int M, int N, int K, int WARPS_M, int WARPS_N, bool TRANS_B, int B_ROW, bool B_SWZ,
          typename T, typename C, int THREAD_OFFSET = 0>
TL_DEVICE void gemm_rs(const T* A_regs, const T* B, C* acc) {
  using Tr = MmaTraits<T>;
  constexpr int WM = M / WARPS_M, WN = N / WARPS_N, MI = WM / 16, NI = WN / 8;
  constexpr int STEPS = K / Tr::kStep;
  static_assert(K % Tr::kStep == 0, "gemm tile shape");
  const int warp = (threadIdx.x - THREAD_OFFSET) / 32, lane = threadIdx.x % 32;
  const int n_base = (warp % WARPS_N) * WN;
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    const int k0 = s * Tr::kStep;
    uint32_t b[NI][2];
#pragma unroll
    for (int ni = 0; ni + 1 < NI; ni += 2) {
      load_b<T, TRANS_B, B_ROW, B_SWZ, true>(b[ni], b[ni + 1], B, n_base + ni * 8, k0, lane);
    }
    if constexpr (NI % 2 == 1) {
      load_b<T, TRANS_B, B_ROW, B_SWZ, false>(b[NI - 1], b[NI - 1], B, n_base + (NI - 1) * 8,
                                             k0, lane);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t a[4];
      if constexpr (sizeof(T) == 4) {
        const float* R = reinterpret_cast<const float*>(A_regs) + (mi * STEPS + s) * 4;
        a[0] = to_word_bits<float>(R[0]);
        a[1] = to_word_bits<float>(R[2]);
        a[2] = to_word_bits<float>(R[1]);
        a[3] = to_word_bits<float>(R[3]);
      } else {
        const uint32_t* W = reinterpret_cast<const uint32_t*>(A_regs) + (mi * STEPS + s) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) a[j] = W[j];
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        mma_any<T>(acc + (mi * NI + ni) * 4, a, b[ni]);
      }
    }
  }
}

}  // namespace tl
