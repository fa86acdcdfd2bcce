#include "support.h"

lacs_dims test_dims(int64_t T)
{
    lacs_dims d = {.B = 2, .T = T, .H = 2, .HV = 4, .K = 12, .V = 10};
    return d;
}
