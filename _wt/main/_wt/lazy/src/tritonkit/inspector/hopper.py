"""Limits of one Hopper SM, and how many blocks of a kernel fit on it at once."""

from __future__ import annotations

from .report import Occupancy

# Limits of one Hopper SM (H100 and H200 alike; CUDA occupancy calculator, compute capability 9.0).
REGISTERS_PER_SM = 65536
REGISTER_SUBPARTITIONS = 4            # the register file is split between the SM's 4 schedulers
REGISTER_UNIT = 256                   # registers are handed to a warp in units of 256
SHARED_PER_SM = 228 * 1024
SHARED_PER_BLOCK = 227 * 1024
SHARED_RESERVED_PER_BLOCK = 1024      # the driver keeps 1 KB of each block's shared memory
SHARED_UNIT = 128
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
H200_SMS = 132


def occupancy(registers: int, shared: int, num_warps: int) -> Occupancy:
    """Blocks of this kernel that fit on one Hopper SM at once, with the arithmetic."""
    regs_per_warp = -(-max(registers, 1) * 32 // REGISTER_UNIT) * REGISTER_UNIT
    warps_per_partition = (REGISTERS_PER_SM // REGISTER_SUBPARTITIONS) // regs_per_warp
    by_registers = warps_per_partition * REGISTER_SUBPARTITIONS // num_warps
    shared_per_block = -(-shared // SHARED_UNIT) * SHARED_UNIT + SHARED_RESERVED_PER_BLOCK
    by_shared = SHARED_PER_SM // shared_per_block if shared <= SHARED_PER_BLOCK else 0
    by_warps = MAX_WARPS_PER_SM // num_warps
    limits = {"warps": by_warps, "registers": by_registers, "shared memory": by_shared,
              "the 32-block cap": MAX_BLOCKS_PER_SM}
    blocks = min(limits.values())
    limited_by = min(limits, key=limits.get) if blocks < MAX_BLOCKS_PER_SM else "the 32-block cap"
    warps = blocks * num_warps
    arithmetic = [
        f"registers: {registers}/thread x 32 = {registers * 32}/warp, rounded up to {regs_per_warp} "
        f"(units of {REGISTER_UNIT}); each of 4 quarters of the SM holds "
        f"{REGISTERS_PER_SM // REGISTER_SUBPARTITIONS} // {regs_per_warp} = {warps_per_partition} warps, "
        f"so {warps_per_partition * REGISTER_SUBPARTITIONS} warps // {num_warps} per block = {by_registers} blocks",
        (f"shared memory: {shared} B/block, rounded to {SHARED_UNIT} B, + 1 KB reserved = {shared_per_block} B; "
         f"{SHARED_PER_SM} // {shared_per_block} = {by_shared} blocks")
        if shared <= SHARED_PER_BLOCK else
        f"shared memory: {shared} B/block is more than the {SHARED_PER_BLOCK} B a block may have: cannot launch",
        f"warps: {MAX_WARPS_PER_SM} // {num_warps} = {by_warps} blocks; at most {MAX_BLOCKS_PER_SM} blocks per SM",
        f"=> {blocks} blocks x {num_warps} warps = {warps} of {MAX_WARPS_PER_SM} warps "
        f"= {100 * warps / MAX_WARPS_PER_SM:.0f}% occupancy, limited by {limited_by}",
    ]
    return Occupancy(blocks, warps, 100 * warps / MAX_WARPS_PER_SM, limited_by,
                     by_registers, by_shared, by_warps, arithmetic)
