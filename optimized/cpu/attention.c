/* PLACEHOLDER: the attention forms (issue 6). */
#include "cpu.h"
int lacs_cpu_attention(const lacs_cpu_call *c) { (void)c; return LACS_UNSUPPORTED; }
