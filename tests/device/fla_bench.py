"""fla's Triton chunk_gated_delta_rule (and chunk_kda, where present) on the shapes of make bench-cuda (optimized/cuda/README.md section 7), for comparison.

Run on a GPU machine where fla (PyPI: flash-linear-attention / fla-core) and torch are installed:
    python3 tests/device/fla_bench.py
Prints, per shape, the median time of the forward (triton.testing.do_bench) and TFLOP/s by optimized/cuda/README.md section 2's
count of the chunked algorithm's products, so the figure is comparable with lacs-bench-cuda's line.
fla's code is not part of lacs; it is imported from the installed package.
"""
import sys

import torch
import triton

try:
    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
except Exception as e:  # noqa: BLE001
    print(f"fla_bench: fla not importable: {e}")
    sys.exit(2)


def flops(T, H, K, V, C=64):
    total = 0
    for start in range(0, T, C):
        n = min(C, T - start)
        total += 6 * n * K * V + 6 * n * n * K + 4 * n * n * V + n ** 3 / 3
    return total * H


def gdn_inputs(B, T, H, K, V, dtype, per_channel_gate=False, random_h0=False):
    """The benchmark's inputs on the GPU, seeded: q, k (unit rows), v, beta in [0.1, 0.9], the log gate (per head,
    or per key channel for KDA) in [-0.1, 0], and h0 (zeros, or normal)."""
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(B, T, H, K, device=dev, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev, dtype=torch.float32), dim=-1).to(dtype)
    v = torch.randn(B, T, H, V, device=dev, dtype=dtype)
    beta = (0.1 + 0.8 * torch.rand(B, T, H, device=dev)).to(dtype)
    g = (-0.1 * torch.rand(*((B, T, H, K) if per_channel_gate else (B, T, H)), device=dev)).float()
    h0 = (torch.randn if random_h0 else torch.zeros)(B, H, K, V, device=dev, dtype=torch.float32)
    return q, k, v, beta, g, h0


def run_kda(B, T, H, K, V, dtype=torch.bfloat16):
    """fla's chunk_kda (the per-channel gate gk), where the installed fla has it."""
    try:
        from fla.ops.kda import chunk_kda
    except Exception as e:  # noqa: BLE001
        print(f"fla chunk_kda: not in this fla ({e})")
        return
    q, k, v, beta, g, h0 = gdn_inputs(B, T, H, K, V, dtype, per_channel_gate=True)

    def fwd():
        return chunk_kda(q, k, v, g, beta, scale=K ** -0.5, initial_state=h0, output_final_state=True)

    try:
        with torch.no_grad():
            fwd()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(fwd, warmup=100, rep=500, return_mode="median")
    except Exception as e:  # noqa: BLE001
        print(f"fla chunk_kda: failed to run ({e})")
        return
    tf = flops(T, H, K, V) * B / (ms * 1e-3) / 1e12
    print(f"fla chunk_kda {str(dtype).split('.')[-1]} B={B} T={T} H={H} K={K} V={V}  {ms:9.3f} ms  {tf:7.1f} TFLOP/s")


def run(B, T, H, K, V, dtype=torch.bfloat16):
    q, k, v, beta, g, h0 = gdn_inputs(B, T, H, K, V, dtype)

    def fwd():
        return chunk_gated_delta_rule(q, k, v, g, beta, scale=K ** -0.5, initial_state=h0,
                                      output_final_state=True)

    with torch.no_grad():
        fwd()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(fwd, warmup=100, rep=500, return_mode="median")
    tf = flops(T, H, K, V) * B / (ms * 1e-3) / 1e12
    print(f"fla chunk_gated_delta_rule {str(dtype).split('.')[-1]} B={B} T={T} H={H} K={K} V={V}  {ms:9.3f} ms  {tf:7.1f} TFLOP/s")


def run_backward(B, T, H, K, V, dtype=torch.bfloat16):
    """fla's chunk_gated_delta_rule forward and backward (every gradient, h0 and the final state's cotangent), beside
    lacs-bench-cuda's gated_delta_rule_vjp line: the time of forward + backward, and of the backward alone as
    the difference with the forward's."""
    q, k, v, beta, g, h0 = gdn_inputs(B, T, H, K, V, dtype, random_h0=True)
    do = torch.randn(B, T, H, V, device="cuda", dtype=dtype)
    dht = torch.randn(B, H, K, V, device="cuda", dtype=torch.float32)
    leaves = [t.requires_grad_() for t in (q, k, v, beta, g, h0)]

    def fwd():
        return chunk_gated_delta_rule(q, k, v, g, beta, scale=K ** -0.5, initial_state=h0, output_final_state=True)

    def fwd_bwd():
        o, ht = fwd()
        torch.autograd.backward([o, ht], [do, dht])
        for t in leaves:
            t.grad = None

    try:
        fwd_bwd()
        torch.cuda.synchronize()
        ms_both = triton.testing.do_bench(fwd_bwd, warmup=50, rep=300, return_mode="median")
        ms_fwd = triton.testing.do_bench(fwd, warmup=50, rep=300, return_mode="median")
    except Exception as e:  # noqa: BLE001
        print(f"fla chunk_gated_delta_rule backward: failed to run ({e})")
        return
    print(f"fla chunk_gated_delta_rule fwd+bwd {str(dtype).split('.')[-1]} B={B} T={T} H={H} K={K} V={V}  "
          f"{ms_both:9.3f} ms  (backward alone {ms_both - ms_fwd:.3f} ms, "
          f"{B * T * H / ((ms_both - ms_fwd) * 1e-3) / 1e6:.2f} Mtoken-heads/s)")


if __name__ == "__main__":
    print(f"fla {getattr(fla, '__version__', '?')}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name()}")
    run(1, 16384, 16, 128, 128)
    run(1, 8192, 8, 128, 128)
    run(1, 4096, 16, 128, 128)
    run_kda(1, 16384, 16, 128, 128)
    run_backward(1, 4096, 16, 128, 128)
