/* PLACEHOLDER: mesa_net (issue 6). */
#include "cpu.h"
int lacs_cpu_mesa_net(const lacs_cpu_call *c) { (void)c; return LACS_UNSUPPORTED; }
