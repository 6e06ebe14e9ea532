"""torch_nccl_bench.py: one rank of bench/torch_nccl_bench.sh (which says what it is for).

    torchrun --nproc_per_node=N bench/torch_nccl_bench.py OUT.jsonl

torch.distributed's six collectives (all_reduce in place, all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single, broadcast and reduce from rank 0), bf16, on
ordinary tensors of torch's caching allocator, at each size of SIZES (nccl-tests' bytes,
default 1K..1G by 4x): the time per call in a CUDA graph and eagerly, with
bench/torch_bench.py's clocks (the median of SAMPLES samples of the maximum over ranks).
The program does not know whether libccl_nccl is preloaded: the script runs it with and
without. Before timing, one call on small integers (exact in bf16) gives a checksum of
rank 0's result, for the script to compare between the two runs. Rank 0 appends a JSON
line per collective and size to OUT as it goes, so a run cut short keeps what it timed.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402  (its calls, buffers and clocks; no ccl needed here)

tb.torch, tb.dist = torch, dist

SIZES = os.environ.get("SIZES", "1K,4K,16K,64K,256K,1M,4M,16M,64M,256M,1G")
SAMPLES = int(os.environ.get("SAMPLES", "3"))
BIG = 16 << 20  # above it, fewer calls per sample: a 1 GB call takes milliseconds


def checksum(coll, send, recv):
    """A sum over a strided sample of rank 0's result (exact: small integers, in double)."""
    out = send if coll in tb.INPLACE else recv
    step = max(1, out.numel() // 4096)
    return float(out[::step].double().sum().item())


def nccl_version():
    v = torch.cuda.nccl.version()  # a tuple (2, 27, 5); an int in older torch
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def main():
    out_path = sys.argv[1]
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    sizes = [tb.parse_size(s) for s in SIZES.split(",") if s.strip()]
    out = open(out_path, "w") if rank == 0 else None
    if out:
        meta = {"meta": True, "ranks": n, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "nccl": nccl_version(),
                "preload": os.environ.get("LD_PRELOAD", ""), "samples": SAMPLES}
        out.write(json.dumps(meta) + "\n")
        out.flush()
    for coll in tb.COLLS:
        for nbytes in sizes:
            send, recv = tb.buffers(coll, nbytes, n, tb.alloc_plain)
            tb.fill(send, rank)
            fn = tb.nccl_call(coll, send, recv)
            fn()
            torch.cuda.synchronize()
            total = checksum(coll, send, recv)
            calls, replays = (3, 2) if nbytes > BIG else (10, 10)
            graph = tb.time_graph(fn, calls, replays, SAMPLES)
            eager = tb.time_eager(fn, calls, SAMPLES)
            if out:
                out.write(json.dumps({"coll": coll, "bytes": nbytes, "graph_us": graph, "eager_us": eager,
                                      "checksum": total}) + "\n")
                out.flush()
                print(f"{coll} {nbytes}: graph {graph:.2f} us, eager {eager:.2f} us", flush=True)
            del fn, send, recv
    torch.cuda.synchronize()
    dist.destroy_process_group()  # libccl_nccl's routing summary, where preloaded (CCL_NCCL_SUMMARY=1)


if __name__ == "__main__":
    main()
