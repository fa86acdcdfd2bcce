/* lacs: Linear-Attention Conformance Suite, lacs spec 1.3 (SPEC.md).
 * The whole public interface; link with -llacs -lcjson -lm. */
#ifndef LACS_LACS_H
#define LACS_LACS_H

#include "lacs/types.h"
#include "lacs/reference.h"
#include "lacs/reference_ld.h"
#include "lacs/compare.h"
#include "lacs/forms.h"
#include "lacs/prng.h"
#include "lacs/plugin.h"
#include "lacs/safetensors.h"
#include "lacs/ops.h"
#include "lacs/catalog.h"
#include "lacs/gauge.h"
#include "lacs/check.h"
#include "lacs/cases.h"
#include "lacs/verdict.h"
#include "lacs/output.h"
#include "lacs/report.h"
#include "lacs/cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
