/* builtin:cpu's workspaces kept between calls (optimized/cpu/cpu.h,
 * lacs_cpu_scratch_*; lacs_cpu_release_scratch in lacs/cpu.h):
 *   cpu_scratch/reused_zeroed_and_aligned
 *       a buffer given back is handed out again for a request it covers (the
 *       smallest that does), never for one larger than it; every buffer is
 *       64-byte aligned and lacs_cpu_scratch_calloc zeroes a reused one that
 *       was written; lacs_cpu_release_scratch empties the cache;
 *   cpu_scratch/bounded
 *       at most LACS_CPU_SCRATCH_KEPT buffers and LACS_CPU_SCRATCH_KEPT_BYTES
 *       are kept: a buffer larger than the byte limit is not kept, and of
 *       more buffers than slots the largest are;
 *   cpu_scratch/threads
 *       8 threads taking and giving back buffers at once, each writing its
 *       own pattern and reading it back: no buffer is handed to two at once.
 * Under AddressSanitizer nothing is kept (a use after free must still be
 * caught), and the tests that need reuse say so and check that instead. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../optimized/cpu/cpu.h"
#include "lacs/cpu.h"

#if defined(__SANITIZE_ADDRESS__)
#define KEEPS 0
#else
#define KEEPS 1
#endif

Test(cpu_scratch, reused_zeroed_and_aligned)
{
    lacs_cpu_release_scratch();
    unsigned char *a = lacs_cpu_scratch_alloc(1 << 20);
    cr_assert_not_null(a);
    cr_expect_eq((uintptr_t)a % 64, 0, "not 64-byte aligned");
    memset(a, 0xab, 1 << 20);
    lacs_cpu_scratch_free(a);
    unsigned char *b = lacs_cpu_scratch_calloc(1000);
    cr_assert_not_null(b);
    cr_expect_eq((uintptr_t)b % 64, 0, "not 64-byte aligned");
    if (KEEPS)
        cr_expect_eq(b, a, "a kept buffer that covers the request was not reused");
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(b[i], 0, "calloc left byte %d of a reused buffer at %#x", i, b[i]);
    lacs_cpu_scratch_free(b);
    /* a request larger than every kept buffer gets a new one */
    unsigned char *c = lacs_cpu_scratch_alloc((1 << 20) + 1);
    cr_assert_not_null(c);
    cr_expect_neq(c, a, "a buffer smaller than the request was handed out");
    /* the smallest that covers: with 1 MiB + 64 and 1 MiB kept, a 4 KiB request takes the 1 MiB one */
    lacs_cpu_scratch_free(c);
    unsigned char *d = lacs_cpu_scratch_alloc(4096);
    if (KEEPS)
        cr_expect_eq(d, a, "not the smallest kept buffer that covers the request");
    lacs_cpu_scratch_free(d);
    lacs_cpu_release_scratch();
    unsigned char *e = lacs_cpu_scratch_alloc(4096);
    cr_assert_not_null(e);
    lacs_cpu_scratch_free(e);
    lacs_cpu_scratch_free(NULL);
    lacs_cpu_release_scratch();
}

Test(cpu_scratch, bounded)
{
    lacs_cpu_release_scratch();
    /* more than the byte limit: not kept, so a second request of the same size is a new allocation (its old
     * address may come back from the system, so check through a smaller buffer kept meanwhile instead) */
    void *huge = lacs_cpu_scratch_alloc(LACS_CPU_SCRATCH_KEPT_BYTES + 4096);
    cr_assert_not_null(huge);
    lacs_cpu_scratch_free(huge);
    void *small = lacs_cpu_scratch_alloc(64);
    cr_assert_not_null(small);
    cr_expect(small != huge || !KEEPS, "a buffer over the byte limit was kept");
    lacs_cpu_scratch_free(small);
    lacs_cpu_release_scratch();
    /* more buffers than slots: the largest are kept */
    enum { N = LACS_CPU_SCRATCH_KEPT + 4 };
    void *buffers[N];
    for (int i = 0; i < N; i++) {
        buffers[i] = lacs_cpu_scratch_alloc((size_t)(i + 1) * 4096);
        cr_assert_not_null(buffers[i]);
    }
    for (int i = 0; i < N; i++)
        lacs_cpu_scratch_free(buffers[i]);
    if (KEEPS) {
        /* the four smallest (1..4 pages) were let go: a request of 1 page gets the 5-page buffer */
        void *again = lacs_cpu_scratch_alloc(4096);
        cr_expect_eq(again, buffers[4], "the smallest of the buffers kept is not the fifth");
        lacs_cpu_scratch_free(again);
    }
    lacs_cpu_release_scratch();
}

static void *take_and_give(void *argument)
{
    const unsigned char pattern = (unsigned char)(uintptr_t)argument;
    for (int round = 0; round < 2000; round++) {
        const size_t bytes = (size_t)(round % 7 + 1) * 1024;
        unsigned char *p = lacs_cpu_scratch_alloc(bytes);
        if (!p)
            return (void *)1;
        memset(p, pattern, bytes);
        for (size_t i = 0; i < bytes; i += 61)
            if (p[i] != pattern)
                return (void *)2; /* another thread wrote into this buffer */
        lacs_cpu_scratch_free(p);
    }
    return NULL;
}

Test(cpu_scratch, threads)
{
    lacs_cpu_release_scratch();
    pthread_t threads[8];
    for (int t = 0; t < 8; t++)
        cr_assert_eq(pthread_create(&threads[t], NULL, take_and_give, (void *)(uintptr_t)(t + 1)), 0);
    for (int t = 0; t < 8; t++) {
        void *result;
        pthread_join(threads[t], &result);
        cr_expect_null(result, "thread %d: %s", t, result == (void *)1 ? "out of memory" : "a buffer shared");
    }
    lacs_cpu_release_scratch();
}
