/* builtin:cuda under emulation: the scheduler (emulation.h says what and why).
 *
 * A launch runs its blocks one after another. A block's threads are fibers,
 * run round-robin on the calling OS thread; a fiber runs until it
 * waits (a barrier, a shuffle) or returns. A wait is a counter and a
 * generation: the last thread to arrive opens the barrier for the others. A
 * whole round in which no fiber arrives anywhere or returns, while some still
 * wait, is a deadlock: a barrier not every thread reaches.
 *
 * The schedule (rule 2's check): LACS_CUDA_EMULATION_SCHEDULE=reverse runs the
 * blocks from the last and each round's fibers from the last thread, so that
 * a read racing with another thread's write sees the write in one schedule
 * and not in the other; a race-free kernel gives the same bits in both.
 *
 * Switching fibers: on x86-64 Linux a dozen instructions that save and
 * restore the callee-saved registers, MXCSR and the x87 control word
 * (lacs_fiber_switch, below: the SysV ABI's callee-saved state); elsewhere,
 * or with -DLACS_CUDA_EMULATION_UCONTEXT, ucontext's swapcontext, which also
 * saves the signal mask with a system call at every switch (about half of
 * the emulation's time).
 */
#include <stdint.h>
#include <ucontext.h>

#include "emulation.h"

#if defined(__x86_64__) && defined(__linux__) && !defined(LACS_CUDA_EMULATION_UCONTEXT)
#define LACS_FAST_FIBERS 1
/* Saves the callee-saved state on the current stack, stores its pointer in
 * *save, and resumes the stack at `load` (a stack saved by this function, or
 * one prepared by prepare_stack). */
extern "C" void lacs_fiber_switch(void **save, void *load);
asm(".text\n"
    ".globl lacs_fiber_switch\n"
    ".hidden lacs_fiber_switch\n"
    ".type lacs_fiber_switch, @function\n"
    "lacs_fiber_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size lacs_fiber_switch, .-lacs_fiber_switch\n");
#else
#define LACS_FAST_FIBERS 0
#endif

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

const size_t fiber_stack_bytes = 256 * 1024;

struct barrier {
    int arrived;
    unsigned generation;
};

struct block_state {
    ucontext_t scheduler;
    ucontext_t *fibers;
    void *scheduler_sp;           /* LACS_FAST_FIBERS: the saved stacks */
    void **fiber_sp;
    unsigned char **stacks;
    int n_threads;
    int current;
    int progress;                 /* set when a fiber arrives at a barrier or returns */
    barrier block_barrier;
    barrier *warp_barriers;
    float *shuffle_slots;         /* one per thread */
    unsigned char *shared;
    const std::function<void()> *body;
};

block_state *running = nullptr;

void set_coordinates(int linear)
{
    const unsigned x = blockDim.x, y = blockDim.y;
    threadIdx = dim3(linear % x, (linear / x) % y, linear / (x * y));
}

void yield_to_scheduler(void)
{
#if LACS_FAST_FIBERS
    lacs_fiber_switch(&running->fiber_sp[running->current], running->scheduler_sp);
#else
    swapcontext(&running->fibers[running->current], &running->scheduler);
#endif
}

/* Waits until `participants` threads have arrived at b. */
void wait_at(barrier *b, int participants)
{
    const unsigned generation = b->generation;
    running->progress = 1;
    if (++b->arrived == participants) {
        b->arrived = 0;
        b->generation++;
        return;
    }
    while (b->generation == generation)
        yield_to_scheduler();
}

/* A fiber's life: the kernel's body, then a mark that it returned, and back
 * to the scheduler for good (ucontext: uc_link takes it there). */
void fiber_main(void)
{
    (*running->body)();
    running->current = -1;
#if LACS_FAST_FIBERS
    void *finished_sp;
    lacs_fiber_switch(&finished_sp, running->scheduler_sp);
#endif
}

#if LACS_FAST_FIBERS
/* A new fiber's stack as lacs_fiber_switch leaves one: the control words, six
 * registers, and fiber_main as the address it returns to, so that fiber_main
 * starts as if called (the stack 16-byte aligned before the call). */
void *prepare_stack(unsigned char *stack, size_t bytes)
{
    void **sp = reinterpret_cast<void **>(reinterpret_cast<uintptr_t>(stack + bytes) & ~(uintptr_t)15);
    *--sp = nullptr;                                     /* fiber_main's own return address: never used */
    *--sp = reinterpret_cast<void *>(&fiber_main);
    for (int i = 0; i < 6; i++)
        *--sp = nullptr;                                 /* rbp, rbx, r12 .. r15 */
    const unsigned mxcsr = __builtin_ia32_stmxcsr(); /* the launching thread's: rounding, no traps */
    unsigned short x87;
    asm volatile("fnstcw %0" : "=m"(x87));
    *--sp = nullptr;
    memcpy(sp, &mxcsr, 4);
    memcpy(reinterpret_cast<char *>(sp) + 4, &x87, 2);
    return sp;
}
#endif

} // namespace

/* The mutant LACS_CUDA_MUTANT names (cuda_common.cuh), read once. */
int lacs_cuda_mutant_selected(void)
{
    static int selected = -1;
    if (selected < 0) {
        static const char *const names[] = {"", "state_bf16", "gate_per_token", "no_rescale", "sech2_from_tanh",
                                            "mesa_stale_state", "vjp_no_erase", "vjp_dg_of_factor",
                                            "attn_vjp_no_row_sum", "attn_vjp_gate_sign"};
        const char *name = getenv("LACS_CUDA_MUTANT");
        selected = 0;
        for (int i = 1; name && i < (int)(sizeof names / sizeof names[0]); i++)
            if (strcmp(name, names[i]) == 0)
                selected = i;
        if (name && *name && selected == 0) {
            fprintf(stderr, "lacs CUDA emulation: LACS_CUDA_MUTANT=%s names no mutant\n", name);
            abort();
        }
    }
    return selected;
}

int nvcuda::wmma::lacs_emulated_lane(void)
{
    return running->current % 32;
}

unsigned char *lacs_emulated_shared_memory(void) { return running->shared; }

void __syncthreads(void) { wait_at(&running->block_barrier, running->n_threads); }

void lacs_emulated_misaligned(const void *p, size_t alignment, const char *what)
{
    fprintf(stderr, "lacs CUDA emulation: %s at %p is not %zu-byte aligned (block (%u,%u,%u), thread %d): the device "
                    "faults on it\n", what, p, alignment, blockIdx.x, blockIdx.y, blockIdx.z,
            running ? running->current : -1);
    abort();
}

/* Rule 4: the whole warp, with the full mask and width. */
void lacs_emulated_full_warp(const char *what, unsigned mask, int width)
{
    if (mask != 0xffffffffu || width != 32) {
        fprintf(stderr, "lacs CUDA emulation: rule 4: %s with mask 0x%08x and width %d in block (%u,%u,%u), "
                        "thread %d: every lane of the warp takes part (mask 0xffffffff, width 32)\n",
                what, mask, width, blockIdx.x, blockIdx.y, blockIdx.z, running->current);
        abort();
    }
}

void __syncwarp(unsigned mask)
{
    lacs_emulated_full_warp("__syncwarp", mask, 32);
    wait_at(&running->warp_barriers[running->current / 32], 32);
}

float lacs_emulated_shuffle_xor(float value, int lane_mask)
{
    const int me = running->current, warp = me / 32;
    running->shuffle_slots[me] = value;
    __syncwarp();
    const float other = running->shuffle_slots[warp * 32 + ((me % 32) ^ lane_mask)];
    __syncwarp(); /* nobody writes its slot again before every lane has read */
    return other;
}

cudaError_t lacs_emulate_launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()> &body)
{
    const int n_threads = (int)(block.x * block.y * block.z);
    if (n_threads <= 0 || n_threads % 32 != 0 || n_threads > 1024) {
        fprintf(stderr, "lacs CUDA emulation: a block of %d threads is not 1..32 whole warps\n", n_threads);
        return cudaErrorInvalidValue;
    }
    if (shared_bytes > (size_t)lacs_emulated_shared_memory_per_block) {
        fprintf(stderr, "lacs CUDA emulation: %zu bytes of shared memory is more than a block has (%d)\n",
                shared_bytes, lacs_emulated_shared_memory_per_block);
        return cudaErrorInvalidValue;
    }
    block_state state{};
    state.n_threads = n_threads;
    state.body = &body;
    state.fibers = new ucontext_t[n_threads];
    state.fiber_sp = new void *[n_threads];
    state.stacks = new unsigned char *[n_threads];
    state.warp_barriers = new barrier[n_threads / 32]();
    state.shuffle_slots = new float[n_threads];
    state.shared = (unsigned char *)aligned_alloc(128, (shared_bytes + 127) / 128 * 128 + 128); /* the device's is aligned */
    for (int t = 0; t < n_threads; t++)
        state.stacks[t] = new unsigned char[fiber_stack_bytes];
    running = &state;
    gridDim = grid;
    blockDim = block;
    const char *schedule = getenv("LACS_CUDA_EMULATION_SCHEDULE");
    const bool reverse = schedule && strcmp(schedule, "reverse") == 0;
    if (schedule && *schedule && !reverse && strcmp(schedule, "forward") != 0) {
        fprintf(stderr, "lacs CUDA emulation: LACS_CUDA_EMULATION_SCHEDULE=%s: forward or reverse\n", schedule);
        abort();
    }
    const long long n_blocks = (long long)grid.x * grid.y * grid.z;
    bool *const finished = new bool[n_threads]();

    for (long long b = 0; b < n_blocks; b++) {
        const long long linear = reverse ? n_blocks - 1 - b : b;
        const unsigned bx = (unsigned)(linear % grid.x), by = (unsigned)(linear / grid.x % grid.y),
                       bz = (unsigned)(linear / grid.x / grid.y);
        blockIdx = dim3(bx, by, bz);
        memset(state.shared, 0xFF, shared_bytes ? shared_bytes : 1);
        state.block_barrier = barrier{};
        for (int w = 0; w < n_threads / 32; w++)
            state.warp_barriers[w] = barrier{};
        memset(finished, 0, (size_t)n_threads);
        for (int t = 0; t < n_threads; t++) {
#if LACS_FAST_FIBERS
            state.fiber_sp[t] = prepare_stack(state.stacks[t], fiber_stack_bytes);
#else
            getcontext(&state.fibers[t]);
            state.fibers[t].uc_stack.ss_sp = state.stacks[t];
            state.fibers[t].uc_stack.ss_size = fiber_stack_bytes;
            state.fibers[t].uc_link = &state.scheduler;
            makecontext(&state.fibers[t], fiber_main, 0);
#endif
        }
        int live = n_threads;
        while (live > 0) {
            state.progress = 0;
            for (int i = 0; i < n_threads; i++) {
                const int t = reverse ? n_threads - 1 - i : i;
                if (finished[t])
                    continue;
                state.current = t;
                set_coordinates(t);
#if LACS_FAST_FIBERS
                lacs_fiber_switch(&state.scheduler_sp, state.fiber_sp[t]);
#else
                swapcontext(&state.scheduler, &state.fibers[t]);
#endif
                if (state.current == -1) { /* it returned (fiber_main) */
                    finished[t] = true;
                    live--;
                    state.progress = 1;
                }
            }
            if (live > 0 && !state.progress) {
                fprintf(stderr, "lacs CUDA emulation: block (%u,%u,%u): %d of %d threads wait at a barrier "
                                "the others never reach (divergence; rules 2 and 4)\n",
                        bx, by, bz, live, n_threads);
                abort();
            }
        }
    }
    delete[] finished;

    running = nullptr;
    for (int t = 0; t < n_threads; t++)
        delete[] state.stacks[t];
    delete[] state.stacks;
    delete[] state.fibers;
    delete[] state.fiber_sp;
    delete[] state.warp_barriers;
    delete[] state.shuffle_slots;
    free(state.shared);
    return cudaSuccess;
}
