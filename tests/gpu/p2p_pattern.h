/* p2p_pattern.h: the bytes the point-to-point tests send (p2p_gpu.c, p2p_ipc_gpu.c). */
#ifndef CCL_TESTS_P2P_PATTERN_H
#define CCL_TESTS_P2P_PATTERN_H

#include <stddef.h>
#include <stdint.h>

/* Byte i of message `tag` from rank q: no short period, so a byte out of place shows. */
static inline unsigned char pat(int tag, int q, size_t i)
{
    uint32_t x = (uint32_t)i * 0x9E3779B1u + (uint32_t)tag * 0x85EBCA77u + (uint32_t)q * 0xC2B2AE3Du;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 13;
    return (unsigned char)(x ^ (x >> 8) ^ (x >> 16));
}

#endif
