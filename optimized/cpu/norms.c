/* PLACEHOLDER: the norms (issue 6). */
#include "cpu.h"
int lacs_cpu_norm(const lacs_cpu_call *c) { (void)c; return LACS_UNSUPPORTED; }
