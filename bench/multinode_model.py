#!/usr/bin/env python3
"""The cost model of docs/multinode.md: all-reduce of S bytes per rank on M nodes of L
ranks, 400 Gb/s per rank to the network, NVLink inside a node; then the reduce-scatter's
two programs for several nodes, direct_net against hier; then broadcast's and reduce's,
hier against hier_split, and hier_split against hier_chain (a pipelined chain between the
nodes). Prints the tables the page quotes. Every constant is an
assumption named below, or NCCL's own model constant (NVIDIA/nccl src/graph/tuning.cc,
the version cited on the page); nothing is measured."""

L = 8                     # ranks (GPUs, NICs) per node
B_NET = 50e9              # 400 Gb/s per rank, bytes/s
B_NVL = 350e9             # SM stores over NVLink per GPU (docs/perf: 354-364 GB/s measured on H200)
A_NVL = 3e-6              # one NVLink round of a kernel (launch in a graph + a crossing, DESIGN.md section 7)
A_NET = 5e-6              # one network round through the proxy: post, wire, peer applies (assumed)
O_MSG = 0.5e-6            # each further message a proxy posts in the same round (assumed)

# NCCL's model (NVIDIA/nccl src/graph/tuning.cc, the version cited on the page), per
# protocol: base latency, per-hop latency over NVLink and over the network (us), and the
# factor on the bus bandwidth. NCCL picks the fastest algorithm and protocol per size;
# so does this model. (Intra-node LL hops count 1.8x on several nodes, as there.)
RING = {"LL": (3.6, 0.47 * 1.8, 2.7, 1 / 4), "LL128": (10.0, 1.9, 4.0, 0.92), "Simple": (8.4, 3.4, 9.6, 1.0)}
TREE = {"LL": (4.4, 0.52 * 1.8, 5.0, 1 / 3.8), "LL128": (4.4, 1.2, 8.5, 0.915), "Simple": (0.0, 28.0, 50.0, 1.0)}


def hier(S, M):
    """algorithms/allreduce/hier.ccl: A and D within the node, B and C direct between nodes."""
    intra = 2 * A_NVL + 2 * (L - 1) / L * S / B_NVL
    inter = 2 * (A_NET + (M - 2) * O_MSG) + 2 * (M - 1) / (M * L) * S / B_NET
    return intra + inter


def wire(S, M, factor):
    """The NICs' share of an all-reduce: 2(N-1)/N of S over the node's L NICs (ring and
    ideal tree alike), slowed by the protocol's factor."""
    N = M * L
    return 2 * (N - 1) / N * S / (L * B_NET * factor)


def ring(S, M):
    """NCCL's ring: 2(N-1) steps, 2(M-1) of them over the network."""
    N = M * L
    return min((base + (2 * (N - 1) - 2 * (M - 1)) * nvl + 2 * (M - 1) * net) * 1e-6 + wire(S, M, f)
               for base, nvl, net, f in RING.values())


def tree(S, M):
    """NCCL's tree: up and down a chain of L in the node and log2(M) levels between nodes."""
    return min((base + 2 * ((L - 1) * nvl + (M.bit_length() - 1) * net)) * 1e-6 + wire(S, M, f)
               for base, nvl, net, f in TREE.values())


def us(t):
    return f"{t * 1e6:,.0f}" if t >= 1e-4 else f"{t * 1e6:.1f}"


print(f"| nodes M | ranks N | 8 KB: hier / ring / tree (us) | 1 MB | 256 MB |")
print("|---:|---:|---|---|---|")
for M in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
    cells = []
    for S in (8 << 10, 1 << 20, 256 << 20):
        cells.append(" / ".join(us(f(S, M)) for f in (hier, ring, tree)))
    print(f"| {M} | {M * L} | " + " | ".join(cells) + " |")


# Reduce-scatter of b bytes per rank out (N blocks of b in), on M nodes of Lr ranks.
def rs_direct(b, M, Lr):
    """algorithms/reduce_scatter/direct_net.ccl: (M-1)*Lr blocks to their ranks over the
    net in one round, the node's Lr - 1 by memory while the proxy sends."""
    return A_NET + (M - 2) * O_MSG + max((M - 1) * Lr * b / B_NET, (Lr - 1) * b / B_NVL)


def rs_hier(b, M, Lr):
    """algorithms/reduce_scatter/hier.ccl: phase A within the node ((Lr-1)*M blocks out by
    memory), then the M - 1 node sums, each in its own scratch slot, put over the net in one
    round with one flush (one network round trip, as direct_net); with Lr = 1 it is
    direct_net."""
    if Lr == 1:
        return rs_direct(b, M, Lr)
    return A_NVL + (Lr - 1) * M * b / B_NVL + A_NET + (M - 2) * O_MSG + (M - 1) * b / B_NET


def crossover(M, Lr, old_f, new_f):
    """The least power-of-two size from which new_f's time is below old_f's, or None below 1 GB."""
    b = 1
    while b <= 1 << 30:
        if new_f(b, M, Lr) < old_f(b, M, Lr):
            return b
        b *= 2
    return None


def rs_crossover(M, Lr):
    """The least power-of-two b from which hier is the faster, or None below 1 GB."""
    return crossover(M, Lr, rs_direct, rs_hier)


def size(b):
    return f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB" if b >= 1 << 10 else f"{b} B"


print()
print("| nodes M | L = 2: from | L = 4: from | L = 8: from | L = 8, 64 KB: direct_net / hier (us) | L = 8, 1 MB |")
print("|---:|---:|---:|---:|---|---|")
for M in (2, 4, 8, 16, 64, 1024):
    cells = [size(rs_crossover(M, Lr)) if rs_crossover(M, Lr) else "-" for Lr in (2, 4, 8)]
    for b in (64 << 10, 1 << 20):
        cells.append(f"{us(rs_direct(b, M, 8))} / {us(rs_hier(b, M, 8))}")
    print(f"| {M} | " + " | ".join(cells) + " |")


# Broadcast and reduce of S bytes on M nodes of Lr ranks: hier (the whole message through
# the root's NIC) against hier_split (L blocks, each through its local rank's NIC).
def bc_hier(S, M, Lr):
    """algorithms/broadcast/hier.ccl: the root's net puts to M - 1 nodes, then each node's
    receiver puts the message to its Lr - 1 node-mates."""
    spread = A_NVL + (Lr - 1) * S / B_NVL if Lr > 1 else 0
    return A_NET + (M - 2) * O_MSG + (M - 1) * S / B_NET + spread


def bc_split(S, M, Lr):
    """algorithms/broadcast/hier_split.ccl: the root scatters the Lr blocks in its node,
    each block goes to M - 1 nodes from its own rank, each node all-gathers them (the
    root's node meanwhile, as the proxies send); with Lr = 1 it is hier."""
    if Lr == 1:
        return bc_hier(S, M, Lr)
    node = A_NVL + (Lr - 1) / Lr * S / B_NVL
    return node + A_NET + (M - 2) * O_MSG + (M - 1) * S / (Lr * B_NET) + node


def rd_hier(S, M, Lr):
    """algorithms/reduce/hier.ccl: each node's Lr inputs to its summing rank, then M - 1
    node sums into the root through its NIC."""
    gather = A_NVL + (Lr - 1) * S / B_NVL if Lr > 1 else 0
    return gather + A_NET + (M - 1) * S / B_NET


def rd_split(S, M, Lr):
    """algorithms/reduce/hier_split.ccl: a reduce-scatter in each node, each block's M - 1
    node sums to its rank on the root's node, then the Lr block sums onto the root; with
    Lr = 1 it is hier."""
    if Lr == 1:
        return rd_hier(S, M, Lr)
    node = A_NVL + (Lr - 1) / Lr * S / B_NVL
    return node + A_NET + (M - 1) * S / (Lr * B_NET) + node


def split_crossover(M, Lr, hier_f, split_f):
    """The least power-of-two S from which hier_split is the faster, or None below 1 GB."""
    return crossover(M, Lr, hier_f, split_f)


print()
print("| nodes M | L = 2: from | L = 4: from | L = 8: from | L = 8, broadcast of 64 KB: hier / hier_split (us) | 128 KB | 1 MB | 256 MB |")
print("|---:|---:|---:|---:|---|---|---|---|")
for M in (2, 3, 4, 8, 16, 64, 1024):
    cells = []
    for Lr in (2, 4, 8):
        b, r = split_crossover(M, Lr, bc_hier, bc_split), split_crossover(M, Lr, rd_hier, rd_split)
        assert b == r  # the same crossover: reduce's times are broadcast's less (M - 2) o on both sides
        cells.append(size(b) if b else "-")
    for S in (64 << 10, 128 << 10, 1 << 20, 256 << 20):
        cells.append(f"{us(bc_hier(S, M, 8))} / {us(bc_split(S, M, 8))}")
    print(f"| {M} | " + " | ".join(cells) + " |")


def hint_loss(T, Lr, Ms):
    """With hier_split's hint from T bytes (hier below), the most either program is slower
    than the other at some power-of-two size, broadcast or reduce, on M in Ms nodes of Lr."""
    worst = 1.0
    for M in Ms:
        for e in range(31):
            S = 1 << e
            for hier_f, split_f in ((bc_hier, bc_split), (rd_hier, rd_split)):
                h, s = hier_f(S, M, Lr), split_f(S, M, Lr)
                worst = max(worst, (s if S >= T else h) / min(h, s))
    return worst


print()
for T in (32 << 10, 64 << 10, 128 << 10):
    print(f"hint from {size(T)}, up to 8 nodes, the most either is slower than the other: " +
          ", ".join(f"L = {Lr}: {hint_loss(T, Lr, range(2, 9)):.2f}" for Lr in (2, 4, 8)))


# hier_split against hier_chain: each block goes along a chain of the nodes, cut into
# P = 2 M slices (the programs' `pipeline 2 * M`), so every link carries it once and all
# links work at once; a slice of a block is c = S / (Lr P) bytes, and every slice pays a
# net round on every hop (its put, the flush's acknowledgment, the signal).
def chain_slices(M):
    """The programs' `pipeline 2 * M`: the fill (M - 1 hops before the last node's first
    slice) costs at most half the stream, whatever M."""
    return 2 * M


def bc_chain(S, M, Lr):
    """algorithms/broadcast/hier_chain.ccl. Per slice the root posts its block's net put and,
    while the proxy sends, puts the other Lr - 1 blocks to their node-mates and its own to
    the first of them, who passes it on (Lr c by memory); every other rank forwards its
    block one hop (net) and to its node-mates (at most Lr - 1 slices by memory) at once: a
    stage takes t = max(a_net + c / B_net, Lr c / B_nvl). The first slice passes M stages
    (the root's, then M - 1 hops), then P - 1 more follow, one stage apart; a_nvl at each
    end (the launch, the last node's spread). Left out: the first slice's passing of the
    root's block along its node-mates (Lr - 2 crossings, once per call). With Lr = 1: a
    chain of M ranks, M - 1 hops."""
    P = chain_slices(M)
    c = S / (Lr * P)
    hop = A_NET + c / B_NET
    if Lr == 1:
        return (M - 1 + P - 1) * hop
    return 2 * A_NVL + (M + P - 1) * max(hop, Lr * c / B_NVL)


def rd_chain(S, M, Lr):
    """algorithms/reduce/hier_chain.ccl. Per slice every rank puts Lr - 1 slices to its
    node-mates (the reduce-scatter), sums its block, adds the partial sum from the node
    before and puts it one hop on (net), one after the other: t = (Lr - 1) c / B_nvl +
    a_net + c / B_net. The first slice passes M - 1 hops after the head's stage, then P - 1
    more; a_nvl at each end (the launch, the sums into the root's output)."""
    P = chain_slices(M)
    c = S / (Lr * P)
    hop = A_NET + c / B_NET
    if Lr == 1:
        return (M - 1 + P - 1) * hop
    return 2 * A_NVL + (M + P - 2) * ((Lr - 1) * c / B_NVL + hop)


def both(b, r):
    """One cell for the broadcast's and the reduce's crossover: one size when they agree."""
    b, r = size(b) if b else "-", size(r) if r else "-"
    return b if b == r else f"{b} / {r}"


print()
print("| nodes M | L = 1: from | L = 2: from | L = 4: from | L = 8: from | L = 8, broadcast of 1 MB: hier_split / hier_chain (us) | 8 MB | 256 MB | L = 8, reduce of 256 MB |")
print("|---:|---:|---:|---:|---:|---|---|---|---|")
for M in (2, 3, 4, 8, 16, 64, 1024):
    cells = [both(crossover(M, Lr, bc_split, bc_chain), crossover(M, Lr, rd_split, rd_chain)) for Lr in (1, 2, 4, 8)]
    for S in (1 << 20, 8 << 20, 256 << 20):
        cells.append(f"{us(bc_split(S, M, 8))} / {us(bc_chain(S, M, 8))}")
    cells.append(f"{us(rd_split(256 << 20, M, 8))} / {us(rd_chain(256 << 20, M, 8))}")
    print(f"| {M} | " + " | ".join(cells) + " |")


def chain_hint_loss(T, Lr, Ms):
    """With hier_chain's hint from T bytes (hier_split below), the most either program is
    slower than the other at some power-of-two size from 1 KB, broadcast or reduce, on M in
    Ms nodes of Lr; and where (M, size)."""
    worst, where = 1.0, None
    for M in Ms:
        for e in range(10, 35):
            S = 1 << e
            for split_f, chain_f in ((bc_split, bc_chain), (rd_split, rd_chain)):
                a, b = split_f(S, M, Lr), chain_f(S, M, Lr)
                loss = (b if S >= T else a) / min(a, b)
                if loss > worst:
                    worst, where = loss, f"{M} nodes, {size(S)}"
    return worst, where


print()
for T in (4 << 20, 8 << 20, 16 << 20):
    cells = []
    for Lr in (1, 2, 4, 8):
        loss, where = chain_hint_loss(T, Lr, range(2, 9))
        cells.append(f"L = {Lr}: {loss:.2f}" + (f" ({where})" if where else ""))
    print(f"hier_chain's hint from {size(T)}, up to 8 nodes, the most either is slower than the other: " + ", ".join(cells))


# Why a chain and not a tree between the nodes: a binary tree (each node forwards every
# block to two child nodes; a reduce's node adds two children's partial sums) has
# floor(log2 M) hops instead of M - 1 (the depth of a heap of M nodes), but each NIC
# carries its block twice (a broadcast's out, a reduce's in): the hier_tree programs
# (algorithms/broadcast/hier_tree.ccl, algorithms/reduce/hier_tree.ccl), with the same
# node phases as the chain's and its slicing rule (P = 2 depth slices: the fill costs at
# most half the stream, as the chain's P = 2 M), and each node's two puts in one net round
# (a_net + o; on 2 nodes the root's node has one child, and the tree is the chain in 2
# slices).
def tree_depth(M):
    return M.bit_length() - 1


def tree_slices(S, M, Lr):
    """The tree's depth d, slices P, slice bytes c and one hop's time (both children's puts;
    on 2 nodes the root's node has one child: the chain, in 2 slices)."""
    d = tree_depth(M)
    P = 2 * d
    c = S / (Lr * P)
    return d, P, c, (A_NET + c / B_NET if M == 2 else A_NET + O_MSG + 2 * c / B_NET)


def bc_tree(S, M, Lr):
    d, P, c, hop = tree_slices(S, M, Lr)
    if Lr == 1:
        return (d + P - 1) * hop
    return 2 * A_NVL + (d + P) * max(hop, Lr * c / B_NVL)


def rd_tree(S, M, Lr):
    d, P, c, hop = tree_slices(S, M, Lr)
    if Lr == 1:
        return (d + P - 1) * hop
    return 2 * A_NVL + (d + P - 1) * ((Lr - 1) * c / B_NVL + hop)


print()
print("| nodes M | L = 8: hier_chain faster from | broadcast of 8 MB: hier_chain / hier_tree (us) | 64 MB | 1 GB | reduce of 8 MB | 64 MB | 1 GB |")
print("|---:|---:|---|---|---|---|---|---|")
for M in (2, 4, 8, 16, 64, 1024):
    cells = [both(crossover(M, 8, bc_tree, bc_chain), crossover(M, 8, rd_tree, rd_chain))]
    cells += [f"{us(bc_chain(S, M, 8))} / {us(bc_tree(S, M, 8))}" for S in (8 << 20, 64 << 20, 1 << 30)]
    cells += [f"{us(rd_chain(S, M, 8))} / {us(rd_tree(S, M, 8))}" for S in (8 << 20, 64 << 20, 1 << 30)]
    print(f"| {M} | " + " | ".join(cells) + " |")


def tree_hint_loss(Lr, Ms):
    """With the hints as they are (hier_chain from 8 MB, hier_tree never picked), the most
    the chain is slower than the tree at some power-of-two size from 8 MB, broadcast or
    reduce, on M in Ms nodes of Lr; and where (M, size)."""
    worst, where = 1.0, None
    for M in Ms:
        if M * Lr > 64:
            continue
        for e in range(23, 35):
            S = 1 << e
            for chain_f, tree_f, what in ((bc_chain, bc_tree, "broadcast"), (rd_chain, rd_tree, "reduce")):
                loss = chain_f(S, M, Lr) / tree_f(S, M, Lr)
                if loss > worst:
                    worst, where = loss, f"{what}, {M} nodes, {size(S)}"
    return worst, where


print()
cells = []
for Lr in range(1, 9):
    loss, where = tree_hint_loss(Lr, range(2, 9))
    cells.append(f"L = {Lr}: {loss:.2f}" + (f" ({where})" if where else ""))
print("hier_tree never picked, up to 8 nodes (N <= 64), the most hier_chain is slower than it from 8 MB: " + ", ".join(cells))
