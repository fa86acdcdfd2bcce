#include "support.h"

lacs_dims test_dims(int64_t T)
{
    lacs_dims d = {.B = 2, .T = T, .H = 2, .HV = 4, .K = 12, .V = 10};
    return d;
}

double test_pattern(uint64_t i, uint64_t stream)
{
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull + stream * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 29;
    return (double)(z >> 11) * 0x1p-53 * 2.0 - 1.0;
}
