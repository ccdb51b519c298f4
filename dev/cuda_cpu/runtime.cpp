/*
dev/cuda_cpu/runtime.cpp: the CPU execution target's runtime: device memory, streams and events,
kernel launches on fibers, barriers and warp collectives, and the fault reports.

Device memory: each cudaMalloc is its own anonymous mapping, placed so that the allocation ends
(rounded to CUDA's 256-byte granularity) right before an inaccessible page; fresh memory is filled
with 0xFF bytes (NaN as float and as bf16) and, with initcheck, kept inaccessible a page at a time
until something writes it, so that a read of never-written memory is reported. A registry of the
live allocations checks every copy, memset and kernel pointer argument.

Streams: each is a queue that runs only when CUDA guarantees it has run (stream order, below).

Kernels: the blocks of a grid are handed out to worker threads (CUDA_CPU_THREADS, default: the CPUs
this process may use); a worker runs one block at a time as one fiber per CUDA thread. Fibers switch
only at barriers, in thread order (or in reverse order with CUDA_CPU_ORDER=reverse), so a missing
barrier changes the results instead of being hidden by timing luck, and a block that cannot make
progress (a barrier some thread skipped) is reported.

Shared memory: every static __shared__ variable and the extern arena is storage of the worker for the
block it runs, filled with 0xFF at each block's start (uninitialised, as on the GPU), with a shadow
record per byte (its last writer and the reads since, each with its barrier epoch, warp-collective
count and place in the code): initcheck reports a read of an unwritten byte, racecheck two threads'
accesses that no barrier orders (cuda_cpu_device.h has the accessors translate.py's rewrite goes through).
*/
#include "cuda_runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

// ----------------------------------------------------------------------------
// what is running (for the reports)

struct Launch {
    CudaCpuLaunchConfig config;
    const char* name;
    const char* file;
    int line;
    void (*invoke)(void*);
    void* body;
    unsigned long long total_blocks;
    std::atomic<unsigned long long> next_block;
};

enum FiberState { FIBER_READY = 0, FIBER_WAIT_BLOCK, FIBER_WAIT_WARP, FIBER_DONE };

struct Fiber {
    CudaCpuThread thread;  // threadIdx
    void* sp;              // saved stack pointer while switched out; NULL before it starts
    int stack;             // which of the worker's stacks it runs on
    int state;
    int warp;
    int lane;
};

// one warp's collective in progress: who must arrive, who has, and the values they bring
struct Warp {
    int lanes;             // threads of the block in this warp (32 except a last partial warp)
    unsigned int done_mask;
    int arrived;
    unsigned int mask;     // the mask of the collective in progress
    int expected;          // its number of lanes
    const char* what;      // its name
    unsigned int generation;
    uint64_t slots[2][32]; // double-buffered: generation g writes slots[g & 1]
    std::vector<unsigned int> synced;  // the mask of each collective this warp completed in this block, in order
};

// what initcheck and racecheck know of one byte of shared memory in the block being run: its last
// writer and the reads since, each with the block's barrier epoch and the warp's collective count
// at the access (an access at count g of its warp precedes collective g of that warp and follows
// collectives 0..g-1). 0xFF bytes are the state at a block's start: no writer, no reader.
static const uint16_t NO_THREAD = 0xFFFF, SEVERAL_WARPS = 0xFFFE;
struct CudaCpuShadow {
    const void* w_pc;       // where the last write is (a return address in the kernel's code)
    const void* r_pc;       // where the first read of r_epoch is
    uint32_t w_epoch, w_gen;
    uint32_t r_epoch, r_gen;  // the reads' epoch and the latest reader's collective count
    uint32_t r_mask;        // the lanes of r_warp that read it in r_epoch
    uint16_t w_tid;         // the last writer (linear thread index); NO_THREAD: unwritten in this block
    uint16_t r_tid;         // the first reader in r_epoch
    uint16_t r_warp;        // the readers' warp, or SEVERAL_WARPS
    uint16_t unused;
};

// a read of a shared byte no thread had written: reported at the next barrier or the block's end
// unless a write by another thread, unordered with it, makes it a race first (so the verdict does
// not depend on which of the two fibers ran first)
struct PendingRead {
    CudaCpuShared* var;
    size_t off, bytes;
    int tid;
    const void* pc;
};

// a static __shared__ variable of the block a worker runs (one per declaration site and worker)
struct StaticShared {
    CudaCpuShared var;
    std::vector<char> storage;            // data starts 64-byte aligned inside it
    std::vector<CudaCpuShadow> shadow;
    unsigned long long block_serial = 0;  // the block it was last poisoned for
};

struct Worker {
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    char* stacks = nullptr;   // fiber stacks, each above a guard page
    size_t stack_count = 0;
    std::vector<int> free_stacks;  // stacks of finished fibers, reused first (warm in the caches)
    int next_stack = 0;
    size_t position = 0;      // the running fiber's position in the scheduling order
    std::vector<char> dynamic_shared;  // extern __shared__ of the block being run (16-byte aligned start)
    std::vector<CudaCpuShadow> dynamic_shadow;
    CudaCpuShared dynamic_var = {};
    std::vector<std::unique_ptr<StaticShared>> static_shared;  // by site id (stable addresses)
    unsigned long long block_serial = 0;  // counts the blocks this worker started
    void* scheduler_sp = nullptr;
    int live = 0;             // fibers not yet finished
    int done = 0;
    int block_arrived = 0;    // fibers waiting at __syncthreads
    unsigned int epoch = 0;   // __syncthreads passed by the block so far
    PendingRead unwritten = {};  // the first read of an unwritten shared byte, reported at the next barrier
    Launch* launch = nullptr;
    Fiber* current = nullptr;
    char* altstack = nullptr;
};

__thread CudaCpuThread* cuda_cpu_thread;
__thread uint3 cuda_cpu_block_idx;
__thread uint3 cuda_cpu_block_dim;
__thread uint3 cuda_cpu_grid_dim;
static __thread Worker* tl_worker;
static __thread cudaError_t tl_last_error = cudaSuccess;

static const size_t STACK_BYTES = 128 * 1024;
static size_t page_bytes(void) {
    static size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

// "kernel NAME (file:line) block (x,y,z) thread (x,y,z): " when called from device code
static void where(char* buf, size_t n) {
    buf[0] = '\0';
    Worker* w = tl_worker;
    if (w == nullptr || w->launch == nullptr || w->current == nullptr) { return; }
    const Launch* L = w->launch;
    const uint3 t = w->current->thread.idx;
    snprintf(buf, n, "kernel %s (%s:%d) block (%u,%u,%u) thread (%u,%u,%u): ", L->name, L->file, L->line,
             cuda_cpu_block_idx.x, cuda_cpu_block_idx.y, cuda_cpu_block_idx.z, t.x, t.y, t.z);
}

// one line and exit 1; when workers running other blocks hit a fault at the same time, the first one
// reports and the others wait for its exit (one line per failed run)
void cuda_cpu_fatal(const char* fmt, ...) {
    static std::atomic<int> reporting{0};
    if (reporting.exchange(1) != 0) {
        for (;;) { pause(); }
    }
    char prefix[512], msg[2048];
    where(prefix, sizeof(prefix));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "cuda_cpu: %s%s\n", prefix, msg);
    fflush(stderr);
    _exit(1);
}

void cuda_cpu_report(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_cpu: %s\n", msg);
}

// an API call that fails on a GPU too: say why on stderr, return the error (cudaCheck reports it)
#define fail(err, ...) (cuda_cpu_report(__VA_ARGS__), tl_last_error = (err))

// ----------------------------------------------------------------------------
// the CUDA_CPU_* switches (dev/cuda_cpu/README.md): each is read through cuda_cpu_switch, which takes
// only what this table lists and ends the program on anything else with one line naming the variable,
// its value and what it takes (read with atoi, "foo" or "" would have turned a check off)

struct Switch {
    const char* name;
    long long unset;        // the value when the variable is not set
    long long lo, hi;       // it takes the whole numbers lo..hi, written as plain digits,
    const char* words[2];   // or, where given, these two words (the value is the word's index)
    const char* accepts;    // what it takes, for the error line (nullptr: the range lo..hi)
};

static const Switch SWITCHES[] = {
    {"CUDA_CPU_THREADS", 0, 1, 1024, {}, nullptr},  // unset: the CPUs the process may use
    {"CUDA_CPU_ORDER", 0, 0, 1, {"forward", "reverse"}, "forward or reverse"},
    {"CUDA_CPU_INITCHECK", 1, 0, 1, {}, "0 (off) or 1 (on)"},
    {"CUDA_CPU_RACECHECK", 1, 0, 1, {}, "0 (off) or 1 (on)"},
    {"CUDA_CPU_STREAM_ORDER", 1, 0, 2, {}, "0 (off), 1 (on) or 2 (on, every other stream first)"},
    {"CUDA_CPU_POISON", 1, 0, 1, {}, "0 (off) or 1 (on)"},
    {"CUDA_CPU_DEVICES", 8, 1, 1024, {}, nullptr},
    {"CUDA_CPU_GEMM_BLOCK_COLUMNS", 0, 1, 2147483647, {}, nullptr},  // unset: by the GEMM's shape
};

long long cuda_cpu_switch(const char* name) {
    const Switch* sw = nullptr;
    for (const Switch& candidate : SWITCHES) {
        if (strcmp(candidate.name, name) == 0) { sw = &candidate; }
    }
    if (sw == nullptr) { cuda_cpu_fatal("%s is not one of the switches in runtime.cpp", name); }
    const char* value = getenv(name);
    if (value == nullptr) { return sw->unset; }
    if (sw->words[0] != nullptr) {
        for (int i = 0; i < 2; i++) {
            if (strcmp(value, sw->words[i]) == 0) { return i; }
        }
    } else {
        const size_t digits = strspn(value, "0123456789");
        const long long n = digits > 0 && digits <= 18 && value[digits] == '\0' ? strtoll(value, nullptr, 10) : -1;
        if (n >= sw->lo && n <= sw->hi) { return n; }
    }
    if (sw->accepts != nullptr) { cuda_cpu_fatal("%s=%s: use %s", name, value, sw->accepts); }
    cuda_cpu_fatal("%s=%s: use a whole number from %lld to %lld", name, value, sw->lo, sw->hi);
}

// every switch, at the first call that needs the runtime: a malformed one stops even a program that
// never reaches the code reading it
static void check_switches(void) {
    for (const Switch& sw : SWITCHES) { cuda_cpu_switch(sw.name); }
}

// ----------------------------------------------------------------------------
// device memory

struct Allocation {
    char* base;
    size_t bytes;      // what was asked for
    size_t rounded;    // rounded up to 256: [base, base + rounded) is accessible, then 64 KiB that are not
    char* map;
    size_t map_bytes;
    unsigned char* fresh;  // initcheck: per page of [map + page, ...): 1 while nothing wrote it (inaccessible till then)
};

static std::mutex g_mem_mutex;
static std::map<uintptr_t, Allocation> g_device;  // by base address
static std::map<uintptr_t, size_t> g_pinned;      // cudaMallocHost: host memory kernels may also read
static size_t g_device_in_use = 0;
static const size_t DEVICE_MEMORY_BYTES = (size_t)80 << 30;  // what cudaGetDeviceProperties reports
static const size_t GUARD_AFTER_BYTES = 64 * 1024;

static const Allocation* find_allocation_locked(const void* p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_device.upper_bound(a);
    if (it == g_device.begin()) { return nullptr; }
    --it;
    const Allocation& al = it->second;
    // a pointer one past the end is still a pointer into the allocation
    return (a >= (uintptr_t)al.base && a <= (uintptr_t)al.base + al.bytes) ? &al : nullptr;
}

static bool is_pinned_locked(const void* p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin()) { return false; }
    --it;
    return a >= it->first && a <= it->first + it->second;
}

int cuda_cpu_is_device_range(const void* ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    const Allocation* al = find_allocation_locked(ptr);
    return al != nullptr && (uintptr_t)ptr + bytes <= (uintptr_t)al->base + al->bytes;
}

static void describe_pointer(char* buf, size_t n, const void* p) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    const Allocation* al = find_allocation_locked(p);
    if (p == nullptr) {
        snprintf(buf, n, "NULL");
    } else if (al != nullptr) {
        snprintf(buf, n, "%p (offset %zu in a device allocation of %zu bytes)", p, (size_t)((const char*)p - al->base), al->bytes);
    } else if (is_pinned_locked(p)) {
        snprintf(buf, n, "%p (pinned host memory)", p);
    } else {
        snprintf(buf, n, "%p (not device memory: a host pointer?)", p);
    }
}

void cuda_cpu_check_device_range(const void* ptr, size_t bytes, const char* what) {
    if (cuda_cpu_is_device_range(ptr, bytes)) { return; }
    char desc[256];
    describe_pointer(desc, sizeof(desc), ptr);
    cuda_cpu_fatal("%s: %zu bytes at %s are not inside one device allocation", what, bytes, desc);
}

// ----------------------------------------------------------------------------
// initcheck of device memory, a page at a time: a fresh allocation's pages are inaccessible; the first
// write to a page (a fault with the write flag, or a copy, memset, cuBLAS or NCCL output) opens it,
// and a read of a page nothing wrote is reported. Page granularity: a page written in part counts as
// written.

static void runtime_init_once(void);
static bool g_device_initcheck = false;  // CUDA_CPU_INITCHECK, read at the first cudaMalloc or launch

static size_t first_page(const Allocation& al, const void* p) { return (size_t)((const char*)p - (al.map + page_bytes())) / page_bytes(); }

// opens the pages of [p, p + bytes) of al that nothing had written
static void open_pages_locked(const Allocation& al, const void* p, size_t bytes) {
    if (al.fresh == nullptr || bytes == 0) { return; }
    const size_t page = page_bytes(), last = first_page(al, (const char*)p + bytes - 1);
    for (size_t i = first_page(al, p); i <= last; i++) {
        if (al.fresh[i]) {
            mprotect(al.map + page + i * page, page, PROT_READ | PROT_WRITE);
            al.fresh[i] = 0;
        }
    }
}

static void describe_unwritten(char* buf, size_t n, const Allocation& al, const void* p) {
    snprintf(buf, n, "initcheck: reads device memory at offset %lld of an allocation of %zu bytes that nothing has written "
             "since cudaMalloc (checked per %zu-byte page)", (long long)((const char*)p - al.base), al.bytes, page_bytes());
}

void cuda_cpu_device_reads(const void* ptr, size_t bytes, const char* what) {
    cuda_cpu_check_device_range(ptr, bytes, what);
    if (!g_device_initcheck || bytes == 0) { return; }
    char msg[512] = "";
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        const Allocation* al = find_allocation_locked(ptr);
        if (al->fresh == nullptr) { return; }
        const size_t page = page_bytes(), last = first_page(*al, (const char*)ptr + bytes - 1);
        for (size_t i = first_page(*al, ptr); i <= last; i++) {
            if (al->fresh[i]) {
                const char* at = std::max((const char*)ptr, (const char*)al->map + page + i * page);
                describe_unwritten(msg, sizeof(msg), *al, at);
                break;
            }
        }
    }
    if (msg[0] != '\0') { cuda_cpu_fatal("%s: %s", what, msg); }
}

void cuda_cpu_device_writes(void* ptr, size_t bytes, const char* what) {
    cuda_cpu_check_device_range(ptr, bytes, what);
    if (!g_device_initcheck) { return; }
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    open_pages_locked(*find_allocation_locked(ptr), ptr, bytes);
}

// a fault on a page of device memory that nothing wrote: a write opens the page and is retried (true);
// a read is reported; anything else is not ours (false)
static bool device_initcheck_fault(const void* addr, bool write) {
    if (!g_device_initcheck) { return false; }
    char msg[512];
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        auto it = g_device.upper_bound((uintptr_t)addr);
        if (it == g_device.begin()) { return false; }
        --it;
        const Allocation& al = it->second;
        const char* data = al.map + page_bytes();
        if (al.fresh == nullptr || (const char*)addr < data || (const char*)addr >= al.base + al.rounded) { return false; }
        if (!al.fresh[first_page(al, addr)]) { return true; }  // another thread opened it meanwhile: retry
        if (write) {
            open_pages_locked(al, addr, 1);
            return true;
        }
        describe_unwritten(msg, sizeof(msg), al, addr);
    }
    cuda_cpu_fatal("%s", msg);
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    runtime_init_once();
    if (ptr == nullptr) { return fail(cudaErrorInvalidValue, "cudaMalloc: NULL result pointer"); }
    const size_t page = page_bytes();
    size_t rounded = (bytes + 255) / 256 * 256;
    if (rounded == 0) { rounded = 256; }
    size_t data_bytes = (rounded + page - 1) / page * page;
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        if (g_device_in_use + data_bytes > DEVICE_MEMORY_BYTES) {
            *ptr = nullptr;
            return fail(cudaErrorMemoryAllocation, "cudaMalloc: %zu bytes do not fit in the emulated %zu GiB", bytes,
                        DEVICE_MEMORY_BYTES >> 30);
        }
    }
    size_t map_bytes = page + data_bytes + GUARD_AFTER_BYTES;  // inaccessible before and (64 KiB) after
    char* map = (char*)mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) { *ptr = nullptr; return fail(cudaErrorMemoryAllocation, "cudaMalloc: mmap of %zu bytes failed", map_bytes); }
    if (mprotect(map + page, data_bytes, PROT_READ | PROT_WRITE) != 0) {
        munmap(map, map_bytes);
        *ptr = nullptr;
        return fail(cudaErrorMemoryAllocation, "cudaMalloc: mprotect failed");
    }
    Allocation al;
    al.base = map + page + data_bytes - rounded;  // the end of the rounded allocation touches the guard page
    al.bytes = bytes;
    al.rounded = rounded;
    al.map = map;
    al.map_bytes = map_bytes;
    al.fresh = nullptr;
    static const bool poison = cuda_cpu_switch("CUDA_CPU_POISON") != 0;
    if (poison) { memset(al.base, 0xFF, rounded); }  // NaN as fp32 and as bf16
    if (g_device_initcheck) {  // inaccessible until written
        al.fresh = (unsigned char*)malloc(data_bytes / page);
        memset(al.fresh, 1, data_bytes / page);
        mprotect(map + page, data_bytes, PROT_NONE);
    }
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_device[(uintptr_t)al.base] = al;
    g_device_in_use += data_bytes;
    *ptr = al.base;
    return cudaSuccess;
}

static void run_all_streams(void);

cudaError_t cudaFree(void* ptr) {
    if (ptr == nullptr) { return cudaSuccess; }
    run_all_streams();  // as on the GPU: a free waits for the device
    Allocation al;
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        auto it = g_device.find((uintptr_t)ptr);
        if (it == g_device.end()) {
            return fail(cudaErrorInvalidDevicePointer, "cudaFree(%p): not the start of a live device allocation (a host pointer, a double free, or an offset pointer)", ptr);
        }
        al = it->second;
        g_device.erase(it);
        g_device_in_use -= al.map_bytes - page_bytes() - GUARD_AFTER_BYTES;
    }
    munmap(al.map, al.map_bytes);  // a later use of the pointer faults
    free(al.fresh);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
    if (ptr == nullptr) { return fail(cudaErrorInvalidValue, "cudaMallocHost: NULL result pointer"); }
    void* p = malloc(bytes > 0 ? bytes : 1);
    if (p == nullptr) { return fail(cudaErrorMemoryAllocation, "cudaMallocHost: %zu bytes", bytes); }
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_pinned[(uintptr_t)p] = bytes;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) { return cudaMallocHost(ptr, bytes); }

cudaError_t cudaFreeHost(void* ptr) {
    if (ptr == nullptr) { return cudaSuccess; }
    run_all_streams();
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        auto it = g_pinned.find((uintptr_t)ptr);
        if (it == g_pinned.end()) { return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not memory from cudaMallocHost", ptr); }
        g_pinned.erase(it);
    }
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (free_bytes != nullptr) { *free_bytes = DEVICE_MEMORY_BYTES - g_device_in_use; }
    if (total_bytes != nullptr) { *total_bytes = DEVICE_MEMORY_BYTES; }
    return cudaSuccess;
}

static const char* kind_name(enum cudaMemcpyKind kind) {
    switch (kind) {
        case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
        case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
        case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
        case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
        case cudaMemcpyDefault: return "cudaMemcpyDefault";
    }
    return "an unknown cudaMemcpyKind";
}

// a side of a copy must be device memory (whole range), or must not be device memory at all
static bool side_ok(const void* p, size_t bytes, bool device) {
    if (device) { return cuda_cpu_is_device_range(p, bytes) != 0; }
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    return find_allocation_locked(p) == nullptr;
}

// ----------------------------------------------------------------------------
// streams and events
//
// Stream order (CUDA_CPU_STREAM_ORDER, default 1): every stream is a queue, and work runs only when
// CUDA guarantees it has run: at cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize,
// a synchronous copy, cudaFree. A synchronize runs what it waits for and nothing else, in stream
// order, after the events each stream waits for (cudaStreamWaitEvent); cudaDeviceSynchronize runs
// the stream with the newest work first. Work on the legacy default stream (stream 0: cudaMemcpy,
// cudaMemset, launches without a stream) waits for every blocking stream and they wait for it;
// streams created with cudaStreamNonBlocking do not. So a missing event wait between two streams
// runs the reader before the writer and gives stale data, and a host read through a synchronous
// copy of memory that pending work still uses is reported. CUDA_CPU_STREAM_ORDER=2: the other order,
// as legal: before each piece of work of the stream being run, every other stream runs all it can
// (after what it waits for), so a reader that does not wait for its writer's stream runs before the
// writer (the communication stream reducing gradients the compute stream has not written yet); the
// default order catches the converse (a compute stream that does not wait for the communication
// stream reads before the reduction). CUDA_CPU_STREAM_ORDER=0: every launch, copy and collective runs
// when it is issued.

static const unsigned int STREAM_MAGIC = 0x5354524du, EVENT_MAGIC = 0x4556454eu;
struct Use {
    uintptr_t base;        // the allocation
    uintptr_t lo, hi;      // the bytes used; the whole allocation when not known (a kernel's pointer)
    int writes;
    bool known;
};
struct PendingWork {
    unsigned long long seq;  // issue order over all streams
    std::string what;        // "kernel NAME (file:line)", "ncclAllReduce", "cudaMemcpyAsync", ...
    std::vector<Use> uses;   // the device memory it uses
    std::vector<std::pair<CUstream_st*, unsigned long long>> after;  // (stream, seq) that must have run first
    std::function<void()> work;
};
struct CUstream_st {
    unsigned int magic;
    unsigned int flags;
    std::deque<PendingWork> queue;
    unsigned long long last;  // seq of the last work issued to it
    unsigned long long done;  // seq of the last work it ran
    bool running;             // run_stream_until is inside it (CUDA_CPU_STREAM_ORDER=2 does not start it again)
};
struct CUevent_st {
    unsigned int magic;
    unsigned int flags;
    bool recorded;
    double ms;
    CUstream_st* stream;  // where it was last recorded, and the record's seq
    unsigned long long seq;
};

static bool g_stream_order = true;   // CUDA_CPU_STREAM_ORDER, read once: not 0
static bool g_streams_eager = false;  // CUDA_CPU_STREAM_ORDER=2: the other streams run first
static unsigned long long g_issued = 0;
static CUstream_st g_legacy_stream = {STREAM_MAGIC, cudaStreamDefault, {}, 0, 0, false};
static std::vector<CUstream_st*> g_streams = {&g_legacy_stream};  // the live ones

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
static bool stream_ok(cudaStream_t s) { return s == nullptr || s->magic == STREAM_MAGIC; }
static bool event_ok(cudaEvent_t e) { return e != nullptr && e->magic == EVENT_MAGIC; }
static CUstream_st* resolve(cudaStream_t s) { return s == nullptr ? &g_legacy_stream : s; }
static bool blocking(const CUstream_st* s) { return (s->flags & cudaStreamNonBlocking) == 0; }

static const char* stream_kind(const CUstream_st* s) {
    return s == &g_legacy_stream ? "the legacy stream" : (blocking(s) ? "a blocking stream" : "a non-blocking stream");
}

// work w of stream s is about to run: work issued before it to another stream and still pending is
// not ordered before it by any wait; the two must not share an allocation that one of them writes
static void check_unordered(const CUstream_st* s, const PendingWork& w) {
    if (w.uses.empty()) { return; }
    for (const CUstream_st* t : g_streams) {
        if (t == s) { continue; }
        for (const PendingWork& o : t->queue) {
            if (o.seq > w.seq) { break; }
            for (const Use& a : w.uses) {
                for (const Use& b : o.uses) {
                    // a kernel's extent is not known: only ranges both sides state are compared
                    if (!a.known || !b.known || !(a.writes || b.writes) || a.hi <= b.lo || b.hi <= a.lo) { continue; }
                    const uintptr_t lo = std::max(a.lo, b.lo);
                    cuda_cpu_fatal("stream order: %s on %s would run before %s, issued earlier to %s, and nothing orders the "
                                   "two (no cudaStreamWaitEvent, no synchronize); both use %zu bytes at offset %zu of a device "
                                   "allocation and %s", w.what.c_str(), stream_kind(s), o.what.c_str(), stream_kind(t),
                                   (size_t)(std::min(a.hi, b.hi) - lo), (size_t)(lo - a.base),
                                   a.writes && b.writes ? "both write them" : (a.writes ? "the first writes them" : "the second writes them"));
                }
            }
        }
    }
}

static void run_stream_until(CUstream_st* s, unsigned long long seq);

// CUDA_CPU_STREAM_ORDER=2: every other stream that is not already being run runs all it has issued
static void run_other_streams_first(const CUstream_st* s) {
    for (size_t i = 0; i < g_streams.size(); i++) {
        CUstream_st* t = g_streams[i];
        if (t != s && !t->running && !t->queue.empty()) { run_stream_until(t, t->last); }
    }
}

// runs stream s up to and including its work numbered seq (first what that work waits for)
static void run_stream_until(CUstream_st* s, unsigned long long seq) {
    const bool was_running = s->running;
    s->running = true;
    while (s->done < seq && !s->queue.empty()) {
        if (g_streams_eager) {
            run_other_streams_first(s);
            if (s->done >= seq || s->queue.empty()) { break; }  // they needed s's work: it ran in order
        }
        PendingWork w = std::move(s->queue.front());
        s->queue.pop_front();
        for (const auto& dep : w.after) { run_stream_until(dep.first, dep.second); }
        check_unordered(s, w);
        w.work();
        s->done = w.seq;
    }
    s->running = was_running;
}

// everything issued: the stream whose newest work is newest runs first
static void run_all_streams(void) {
    for (;;) {
        CUstream_st* pick = nullptr;
        for (CUstream_st* s : g_streams) {
            if (!s->queue.empty() && (pick == nullptr || s->last > pick->last)) { pick = s; }
        }
        if (pick == nullptr) { return; }
        run_stream_until(pick, pick->last);
    }
}

// the allocations behind the pointers (host and unknown pointers are not tracked)
static void note_uses(PendingWork* w, const CudaCpuUse* uses, size_t n) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    for (size_t i = 0; i < n; i++) {
        const Allocation* al = uses[i].ptr != nullptr ? find_allocation_locked(uses[i].ptr) : nullptr;
        if (al == nullptr) { continue; }
        const uintptr_t base = (uintptr_t)al->base, p = (uintptr_t)uses[i].ptr;
        const bool known = uses[i].bytes > 0;
        w->uses.push_back(Use{base, known ? p : base, known ? p + uses[i].bytes : base + al->bytes, uses[i].writes, known});
    }
}

void cuda_cpu_enqueue(cudaStream_t stream, const char* what, std::initializer_list<CudaCpuUse> uses, std::function<void()> work) {
    runtime_init_once();
    if (!g_stream_order) {
        work();
        return;
    }
    CUstream_st* s = resolve(stream);
    PendingWork w;
    w.seq = ++g_issued;
    w.what = what;
    note_uses(&w, uses.begin(), uses.size());
    if (s == &g_legacy_stream) {  // the legacy stream waits for every blocking stream ...
        for (CUstream_st* t : g_streams) {
            if (t != s && blocking(t) && t->last > t->done) { w.after.emplace_back(t, t->last); }
        }
    } else if (blocking(s) && g_legacy_stream.last > g_legacy_stream.done) {  // ... and they wait for it
        w.after.emplace_back(&g_legacy_stream, g_legacy_stream.last);
    }
    w.work = std::move(work);
    s->queue.push_back(std::move(w));
    s->last = g_issued;
}

// the host reads [src, src + bytes) of device memory: work still pending on a stream it did not wait
// for must not use that allocation (it may still write it)
static void check_host_read(const void* src, size_t bytes, const char* what) {
    uintptr_t lo, hi;
    {
        std::lock_guard<std::mutex> lock(g_mem_mutex);
        const Allocation* al = find_allocation_locked(src);
        if (al == nullptr) { return; }
        lo = (uintptr_t)al->base;
        hi = lo + al->bytes;
    }
    for (const CUstream_st* s : g_streams) {
        for (const PendingWork& w : s->queue) {
            for (const Use& use : w.uses) {
                if (use.writes && use.lo < (uintptr_t)src + bytes && (uintptr_t)src < use.hi) {
                    cuda_cpu_fatal("%s of %zu bytes reads device memory at offset %zu of an allocation of %zu bytes while %s, "
                                   "issued to %s this copy does not wait for, may still write it (synchronize that stream or "
                                   "wait for an event first)", what, bytes, (size_t)((uintptr_t)src - lo), hi - lo,
                                   w.what.c_str(), stream_kind(s));
                }
            }
        }
    }
}

// checks a copy's arguments; on success says which sides are device memory
static cudaError_t check_copy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, bool* dst_device, bool* src_device) {
    if (dst == nullptr || src == nullptr) { return fail(cudaErrorInvalidValue, "%s: NULL pointer", kind_name(kind)); }
    switch (kind) {
        case cudaMemcpyHostToHost: *dst_device = false; *src_device = false; break;
        case cudaMemcpyHostToDevice: *dst_device = true; *src_device = false; break;
        case cudaMemcpyDeviceToHost: *dst_device = false; *src_device = true; break;
        case cudaMemcpyDeviceToDevice: *dst_device = true; *src_device = true; break;
        case cudaMemcpyDefault:
            *dst_device = cuda_cpu_is_device_range(dst, 1) != 0;
            *src_device = cuda_cpu_is_device_range(src, 1) != 0;
            break;
        default: return fail(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: invalid kind %d", (int)kind);
    }
    char desc[256];
    if (!side_ok(dst, bytes, *dst_device)) {
        describe_pointer(desc, sizeof(desc), dst);
        return fail(cudaErrorInvalidValue, "%s of %zu bytes: the destination %s is not %s", kind_name(kind), bytes, desc,
                    *dst_device ? "inside one device allocation" : "host memory");
    }
    if (!side_ok(src, bytes, *src_device)) {
        describe_pointer(desc, sizeof(desc), src);
        return fail(cudaErrorInvalidValue, "%s of %zu bytes: the source %s is not %s", kind_name(kind), bytes, desc,
                    *src_device ? "inside one device allocation" : "host memory");
    }
    return cudaSuccess;
}

static bool is_pinned(const void* p) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    return is_pinned_locked(p);
}

// a copy in stream order. Pageable host memory: the source is taken when the copy is issued, and a
// copy into it returns once done (CUDA's rules); pinned memory is read or written when the copy runs
static cudaError_t copy_in_order(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream,
                                 bool synchronous) {
    if (bytes == 0) { return cudaSuccess; }
    if (!stream_ok(stream)) { return fail(cudaErrorInvalidResourceHandle, "%s: not a live stream", kind_name(kind)); }
    bool dst_device = false, src_device = false;
    cudaError_t err = check_copy(dst, src, bytes, kind, &dst_device, &src_device);
    if (err != cudaSuccess) { return err; }
    const char* name = kind_name(kind);
    std::shared_ptr<std::vector<char>> staged;
    if (!src_device && !is_pinned(src) && g_stream_order) {
        staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + bytes);
    }
    const bool host_waits = synchronous || (!dst_device && !is_pinned(dst));
    cuda_cpu_enqueue(stream, synchronous ? "cudaMemcpy" : "cudaMemcpyAsync", {{dst, 1, bytes}, {src, 0, bytes}}, [=]() {
        if (host_waits && src_device && !dst_device) { check_host_read(src, bytes, name); }
        if (src_device) { cuda_cpu_device_reads(src, bytes, name); }
        if (dst_device) { cuda_cpu_device_writes(dst, bytes, name); }
        memmove(dst, staged ? staged->data() : src, bytes);
    });
    if (host_waits) {
        CUstream_st* s = resolve(stream);
        run_stream_until(s, s->last);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind) {
    return copy_in_order(dst, src, bytes, kind, nullptr, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream) {
    return copy_in_order(dst, src, bytes, kind, stream, false);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) { return cudaSuccess; }
    if (!cuda_cpu_is_device_range(ptr, bytes)) {
        char desc[256];
        describe_pointer(desc, sizeof(desc), ptr);
        return fail(cudaErrorInvalidValue, "cudaMemset of %zu bytes at %s: not inside one device allocation", bytes, desc);
    }
    if (!stream_ok(stream)) { return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: not a live stream"); }
    cuda_cpu_enqueue(stream, "cudaMemset", {{ptr, 1, bytes}}, [=]() {
        cuda_cpu_device_writes(ptr, bytes, "cudaMemset");
        memset(ptr, value, bytes);
    });
    return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) { return cudaMemsetAsync(ptr, value, bytes, nullptr); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    if (stream == nullptr) { return fail(cudaErrorInvalidValue, "cudaStreamCreate: NULL result pointer"); }
    *stream = new CUstream_st{STREAM_MAGIC, flags, {}, 0, 0, false};
    g_streams.push_back(*stream);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream == nullptr || !stream_ok(stream)) { return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream"); }
    run_stream_until(stream, stream->last);  // its work still completes
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), stream));
    stream->magic = 0;  // kept allocated so that a use after destroy is recognised
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (!stream_ok(stream)) { return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream"); }
    CUstream_st* s = resolve(stream);
    run_stream_until(s, s->last);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    if (!stream_ok(stream) || !event_ok(event)) { return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live stream or event"); }
    if (event->stream == nullptr || !g_stream_order) { return cudaSuccess; }  // never recorded: nothing to wait for
    CUstream_st* s = resolve(stream);
    cuda_cpu_enqueue(stream, "cudaStreamWaitEvent", {}, [] {});
    s->queue.back().after.emplace_back(event->stream, event->seq);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    if (event == nullptr) { return fail(cudaErrorInvalidValue, "cudaEventCreate: NULL result pointer"); }
    *event = new CUevent_st{EVENT_MAGIC, flags, false, 0.0, nullptr, 0};
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event_ok(event)) { return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event"); }
    event->magic = 0;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event_ok(event) || !stream_ok(stream)) { return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event or stream"); }
    event->recorded = true;
    cuda_cpu_enqueue(stream, "cudaEventRecord", {}, [event] { event->ms = now_ms(); });
    event->stream = resolve(stream);
    event->seq = event->stream->last;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event_ok(event)) { return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event"); }
    if (event->stream != nullptr) { run_stream_until(event->stream, event->seq); }
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event_ok(event)) { return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: not a live event"); }
    return event->stream == nullptr || event->stream->done >= event->seq ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == nullptr || !event_ok(start) || !event_ok(end)) { return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: bad arguments"); }
    if ((start->flags | end->flags) & cudaEventDisableTiming) {
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    }
    if (!start->recorded || !end->recorded) { return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded"); }
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// the device

// every process sees a node of CUDA_CPU_DEVICES devices (default 8), so that the local ranks of an
// mpirun each select their own, as on a GPU node; each process only ever uses the one it selected
static int device_count(void) {
    return (int)cuda_cpu_switch("CUDA_CPU_DEVICES");
}
static __thread int tl_device = 0;
cudaError_t cudaGetDeviceCount(int* count) { *count = device_count(); return cudaSuccess; }
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= device_count()) {
        return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): the CPU target has %d devices (CUDA_CPU_DEVICES)", device, device_count());
    }
    tl_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) { *device = tl_device; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device < 0 || device >= device_count()) {
        return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): the CPU target has %d devices (CUDA_CPU_DEVICES)", device, device_count());
    }
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "CPU execution target (dev/cuda_cpu, emulating sm_90)");
    prop->totalGlobalMem = DEVICE_MEMORY_BYTES;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024; prop->maxThreadsDim[1] = 1024; prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647; prop->maxGridSize[1] = 65535; prop->maxGridSize[2] = 65535;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->l2CacheSize = 50 * 1024 * 1024;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    run_all_streams();
    return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = tl_last_error;
    tl_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return tl_last_error; }

const char* cudaGetErrorName(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInitializationError: return "cudaErrorInitializationError";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInitializationError: return "initialization error";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

static std::atomic<int> g_max_dynamic_shared{48 * 1024};
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
    if (func == nullptr) { return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: NULL function"); }
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > 227 * 1024) { return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: %d bytes of dynamic shared memory is more than sm_90 has", value); }
        // kernels are launched through closures here, so the opt-in is kept for all kernels (a looser check)
        int cur = g_max_dynamic_shared.load();
        while (value > cur && !g_max_dynamic_shared.compare_exchange_weak(cur, value)) {}
    }
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// fibers: a stack pointer switch (x86-64 System V: the callee-saved registers live on the stack)

extern "C" void cuda_cpu_swap(void** save_sp, void* load_sp);
extern "C" void cuda_cpu_fiber_entry(void);
extern "C" void cuda_cpu_fiber_main(void);
asm(R"(
    .text
    .globl cuda_cpu_swap
    .type cuda_cpu_swap, @function
cuda_cpu_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_cpu_swap, .-cuda_cpu_swap

    .globl cuda_cpu_fiber_entry
    .type cuda_cpu_fiber_entry, @function
cuda_cpu_fiber_entry:
    call cuda_cpu_fiber_main@PLT
    ud2
    .size cuda_cpu_fiber_entry, .-cuda_cpu_fiber_entry
)");

static char* stack_of(Worker* w, size_t i) { return w->stacks + i * (STACK_BYTES + page_bytes()); }

static void ensure_stacks(Worker* w, size_t count) {
    if (w->stack_count >= count) { return; }
    const size_t page = page_bytes(), each = STACK_BYTES + page;
    if (w->stacks != nullptr) { munmap(w->stacks, w->stack_count * each); }
    w->stacks = (char*)mmap(nullptr, count * each, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (w->stacks == MAP_FAILED) { cuda_cpu_fatal("cannot map %zu fiber stacks", count); }
    for (size_t i = 0; i < count; i++) { mprotect(stack_of(w, i), page, PROT_NONE); }  // the guard below each stack
    w->stack_count = count;
}

// a fresh fiber starts in cuda_cpu_fiber_entry with the stack aligned as after a call. The tops are
// staggered by a few cache lines: at equal offsets every switch would land in the same cache sets.
static void* initial_sp(Worker* w, size_t i) {
    uintptr_t top = (uintptr_t)(stack_of(w, i) + page_bytes() + STACK_BYTES - (i % 61) * 64) & ~(uintptr_t)15;
    void** sp = (void**)(top - 8);
    *sp = (void*)cuda_cpu_fiber_entry;
    sp -= 6;  // r15 r14 r13 r12 rbx rbp
    for (int k = 0; k < 6; k++) { sp[k] = nullptr; }
    return sp;
}

// CUDA_CPU_ORDER=reverse: the fibers of a block run from the last thread to the first, so a read of
// another thread's write that lacks a barrier shows in one order or the other (tests run both)
static bool g_reverse_order = false;

// the fiber at a position of the scheduling order (thread order, or its reverse)
static inline Fiber* fiber_at(Worker* w, size_t pos) {
    const size_t n = w->fibers.size();
    return &w->fibers[g_reverse_order ? n - 1 - pos : pos];
}

// makes g the running fiber (giving it a stack on its first run); returns the stack pointer to switch to
static void* enter(Worker* w, Fiber* g, size_t pos) {
    if (g->sp == nullptr) {  // a stack a finished fiber left (warm in the caches), else a new one
        if (!w->free_stacks.empty()) {
            g->stack = w->free_stacks.back();
            w->free_stacks.pop_back();
        } else {
            g->stack = w->next_stack++;
        }
        g->sp = initial_sp(w, (size_t)g->stack);
    }
    w->current = g;
    w->position = pos;
    cuda_cpu_thread = &g->thread;
    return g->sp;
}

// f waits (or is finished): the next fiber in the order runs if it can, else the scheduler picks one.
// Handing over directly is what the scheduler would do anyway, minus a stack switch.
static void switch_away(Worker* w, Fiber* f) {
    const size_t pos = w->position + 1;
    if (pos < w->fibers.size()) {
        Fiber* g = fiber_at(w, pos);
        if (g->state == FIBER_READY) {
            void* sp = enter(w, g, pos);
            cuda_cpu_swap(&f->sp, sp);
            return;
        }
    }
    cuda_cpu_swap(&f->sp, w->scheduler_sp);
}

static Worker* current_worker(const char* what) {
    Worker* w = tl_worker;
    if (w == nullptr || w->current == nullptr) { cuda_cpu_fatal("%s called outside a kernel", what); }
    return w;
}

// ----------------------------------------------------------------------------
// shared memory: per block, poisoned at its start, with the shadow initcheck and racecheck keep

int cuda_cpu_initcheck = 1;
int cuda_cpu_racecheck = 1;

// extern __shared__: the launch's dynamic shared memory of the block this worker runs
CudaCpuShared* cuda_cpu_dynamic_shared_block(void) {
    Worker* w = current_worker("extern __shared__");
    return &w->dynamic_var;
}

// the arena of a block about to run: shared_bytes of 0xFF, no access recorded
static void reset_dynamic_shared(Worker* w, size_t shared_bytes) {
    w->dynamic_shared.assign(shared_bytes + 16, (char)0xFF);
    w->dynamic_shadow.resize(shared_bytes);
    memset((void*)w->dynamic_shadow.data(), 0xFF, shared_bytes * sizeof(CudaCpuShadow));
    CudaCpuShared& v = w->dynamic_var;
    v.data = (char*)(((uintptr_t)w->dynamic_shared.data() + 15) & ~(uintptr_t)15);
    v.shadow = w->dynamic_shadow.data();
    v.bytes = shared_bytes;
    v.escaped = 0;
    v.name = nullptr;
    v.file = nullptr;
    v.line = 0;
}

static int register_shared_site(CudaCpuSharedSite* site) {
    static std::mutex mutex;
    static int next_id = 0;
    std::lock_guard<std::mutex> lock(mutex);
    int id = __atomic_load_n(&site->id, __ATOMIC_ACQUIRE);
    if (id < 0) {
        id = next_id++;
        __atomic_store_n(&site->id, id, __ATOMIC_RELEASE);
    }
    return id;
}

// a static __shared__ declaration executed by a thread: the variable of the block being run, poisoned
// by the first thread of the block that reaches the declaration (no thread can have used it before)
CudaCpuShared* cuda_cpu_static_shared_block(CudaCpuSharedSite* site, size_t bytes) {
    Worker* w = current_worker("__shared__");
    int id = __atomic_load_n(&site->id, __ATOMIC_ACQUIRE);
    if (id < 0) { id = register_shared_site(site); }
    if ((size_t)id >= w->static_shared.size()) { w->static_shared.resize((size_t)id + 1); }
    std::unique_ptr<StaticShared>& s = w->static_shared[(size_t)id];
    if (!s) {
        s.reset(new StaticShared());
        s->storage.resize(bytes + 64);
        s->shadow.resize(bytes);
        CudaCpuShared& v = s->var;
        v.data = (char*)(((uintptr_t)s->storage.data() + 63) & ~(uintptr_t)63);
        v.shadow = s->shadow.data();
        v.bytes = bytes;
        v.name = site->name;
        v.file = site->file;
        v.line = site->line;
    }
    if (s->block_serial != w->block_serial) {  // uninitialised, as on the GPU: NaN until written
        memset(s->var.data, 0xFF, bytes);
        memset((void*)s->var.shadow, 0xFF, bytes * sizeof(CudaCpuShadow));
        s->var.escaped = 0;
        s->block_serial = w->block_serial;
    }
    return &s->var;
}

static void describe_shared(char* buf, size_t n, const CudaCpuShared* v) {
    if (v->name != nullptr) {
        snprintf(buf, n, "__shared__ %s (%zu bytes, %s:%d)", v->name, v->bytes, v->file, v->line);
    } else {
        snprintf(buf, n, "the extern __shared__ arena (%zu bytes)", v->bytes);
    }
}

// an element access outside the variable or the arena
void cuda_cpu_shared_report(const CudaCpuShared* v, const void* p, size_t bytes) {
    char what[256];
    describe_shared(what, sizeof(what), v);
    cuda_cpu_fatal("%zu bytes at offset %lld are outside %s", bytes, (long long)((const char*)p - v->data), what);
}

// file:line of a return address in the kernel's code: the innermost inlined frame outside this
// target's headers (addr2line reads the program's debug information; the translated sources keep the
// original file names and lines through #line)
static void source_line(char* buf, size_t n, const void* pc) {
    snprintf(buf, n, "?");
    Dl_info info;
    if (pc == nullptr || dladdr(pc, &info) == 0 || info.dli_fname == nullptr) { return; }
    uintptr_t addr = (uintptr_t)pc - 1;  // inside the call instruction
    FILE* elf = fopen(info.dli_fname, "rb");
    if (elf != nullptr) {  // a position-independent program is symbolised by offset, a fixed one by address
        unsigned char ident[18] = {0};
        if (fread(ident, 1, sizeof(ident), elf) == sizeof(ident) && ident[16] == 3 /* ET_DYN */) { addr -= (uintptr_t)info.dli_fbase; }
        fclose(elf);
    }
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "addr2line -i -e '%s' 0x%lx 2>/dev/null", info.dli_fname, (unsigned long)addr);
    FILE* out = popen(cmd, "r");
    if (out == nullptr) { return; }
    char line[1024], cwd[512];
    const size_t cwd_len = getcwd(cwd, sizeof(cwd)) != nullptr ? strlen(cwd) : 0;
    while (fgets(line, sizeof(line), out) != nullptr) {
        line[strcspn(line, " \n")] = '\0';  // drops " (discriminator N)"
        if (line[0] != '?' && strstr(line, "cuda_cpu_device.h") == nullptr) {
            const bool under_cwd = cwd_len > 0 && strncmp(line, cwd, cwd_len) == 0 && line[cwd_len] == '/';
            snprintf(buf, n, "%.*s", (int)(n - 1), under_cwd ? line + cwd_len + 1 : line);  // relative to where it runs
            break;
        }
    }
    pclose(out);
}

static void thread_name(char* buf, size_t n, const Worker* w, int tid) {
    const uint3 t = w->fibers[(size_t)tid].thread.idx;
    snprintf(buf, n, "thread (%u,%u,%u)", t.x, t.y, t.z);
}

// the read recorded in unwritten is reported as the thread that made it
static void report_unwritten_read(Worker* w) {
    const PendingRead& r = w->unwritten;
    char what[256], at[512];
    describe_shared(what, sizeof(what), r.var);
    source_line(at, sizeof(at), r.pc);
    w->current = &w->fibers[(size_t)r.tid];
    cuda_cpu_fatal("initcheck: reads %zu bytes at offset %zu of %s that no thread of this block has written, at %s "
                   "(shared memory is uninitialised at a block's start)", r.bytes, r.off, what, at);
}

// the running thread's access at offset off races with an earlier access by thread other at other_pc
// (other < 0: a thread of another warp, not recorded)
static void report_race(Worker* w, CudaCpuShared* v, size_t off, size_t bytes, int write, const void* pc, int other,
                        const void* other_pc, int other_wrote) {
    char what[256], here[512], there[512], them[64];
    describe_shared(what, sizeof(what), v);
    source_line(here, sizeof(here), pc);
    if (other_pc != nullptr) {
        source_line(there, sizeof(there), other_pc);
    } else {
        snprintf(there, sizeof(there), "a place not recorded");
    }
    if (other >= 0) {
        thread_name(them, sizeof(them), w, other);
    } else {
        snprintf(them, sizeof(them), "a thread of another warp");
    }
    cuda_cpu_fatal("racecheck: %s %zu bytes at offset %zu of %s at %s; %s %s them at %s, and no __syncthreads (nor, in one "
                   "warp, a warp collective of both lanes) orders the two", write ? "writes" : "reads", bytes, off, what, here,
                   them, other_wrote ? "wrote" : "read", there);
}

// whether warp wp completed, at a count in [from, to), a collective whose mask holds all of lanes
static bool warp_synced(const Warp& wp, uint32_t from, uint32_t to, unsigned int lanes) {
    for (uint32_t g = from; g < to; g++) {
        if ((wp.synced[g] & lanes) == lanes) { return true; }
    }
    return false;
}

// every element access of a shared variable with initcheck or racecheck on: the shadow of each byte
// is checked against the running thread's access, then updated
void cuda_cpu_shared_access(CudaCpuShared* v, size_t off, size_t bytes, int write) {
    const void* pc = __builtin_return_address(0);
    Worker* w = tl_worker;
    const Fiber* f = w->current;
    const int tid = (int)(f - w->fibers.data());
    const Warp& wp = w->warps[(size_t)f->warp];
    const uint32_t gen = (uint32_t)wp.synced.size(), epoch = w->epoch, lane_bit = 1u << f->lane;
    for (size_t k = off; k < off + bytes; k++) {
        CudaCpuShadow& s = v->shadow[k];
        if (cuda_cpu_racecheck && s.w_tid != NO_THREAD && s.w_tid != tid && s.w_epoch == epoch &&
            !(s.w_tid / 32 == f->warp && warp_synced(wp, s.w_gen, gen, lane_bit | 1u << (s.w_tid % 32)))) {
            report_race(w, v, off, bytes, write, pc, s.w_tid, s.w_pc, 1);
        }
        if (write) {
            if (cuda_cpu_racecheck && s.r_epoch == epoch) {  // every read of this epoch must be ordered before
                int reader = s.r_tid;
                const void* reader_pc = s.r_pc;
                bool ordered = false;
                if (s.r_warp == f->warp) {
                    const unsigned int others = s.r_mask & ~lane_bit;
                    ordered = others == 0 || warp_synced(wp, s.r_gen, gen, others | lane_bit);
                    if (reader == tid && others != 0) { reader = f->warp * 32 + __builtin_ctz(others); reader_pc = nullptr; }
                } else if (reader == tid) {
                    reader = -1;
                    reader_pc = nullptr;
                }
                if (!ordered) { report_race(w, v, off, bytes, write, pc, reader, reader_pc, 0); }
            }
            s.w_tid = (uint16_t)tid;
            s.w_epoch = epoch;
            s.w_gen = gen;
            s.w_pc = pc;
            s.r_epoch = UINT32_MAX;
        } else {
            if (s.w_tid == NO_THREAD && cuda_cpu_initcheck && w->unwritten.var == nullptr) {
                w->unwritten = PendingRead{v, off, bytes, tid, pc};
            }
            if (s.r_epoch != epoch) {
                s.r_epoch = epoch;
                s.r_gen = gen;
                s.r_mask = lane_bit;
                s.r_tid = (uint16_t)tid;
                s.r_warp = (uint16_t)f->warp;
                s.r_pc = pc;
            } else if (s.r_warp == f->warp) {
                s.r_mask |= lane_bit;
                s.r_gen = gen;
            } else {
                s.r_warp = SEVERAL_WARPS;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// __syncthreads

static void release_block_barrier(Worker* w) {
    if (w->done > 0) {
        for (Fiber& f : w->fibers) {
            if (f.state == FIBER_DONE) {
                cuda_cpu_fatal("__syncthreads reached by %d threads of %zu: thread (%u,%u,%u) had already exited "
                               "(a barrier inside divergent code is undefined in CUDA)",
                               w->block_arrived, w->fibers.size(), f.thread.idx.x, f.thread.idx.y, f.thread.idx.z);
            }
        }
    }
    if (w->unwritten.var != nullptr) { report_unwritten_read(w); }
    for (Fiber& f : w->fibers) {
        if (f.state == FIBER_WAIT_BLOCK) { f.state = FIBER_READY; }
    }
    w->block_arrived = 0;
    w->epoch++;
}

void __syncthreads(void) {
    Worker* w = current_worker("__syncthreads");
    Fiber* f = w->current;
    f->state = FIBER_WAIT_BLOCK;
    w->block_arrived++;
    if (w->block_arrived == w->live) { release_block_barrier(w); }
    switch_away(w, f);
}

// the block-wide votes: each thread leaves its predicate in its warp slot
static int block_vote(int predicate, int op) {
    Worker* w = current_worker("__syncthreads_count");
    Fiber* f = w->current;
    Warp& wp = w->warps[f->warp];
    // slots[1] is not used by warp collectives during a __syncthreads (all lanes are here)
    __syncthreads();
    wp.slots[0][f->lane] = predicate != 0;
    __syncthreads();
    int count = 0;
    for (const Warp& v : w->warps) {
        for (int l = 0; l < v.lanes; l++) { count += (int)v.slots[0][l]; }
    }
    __syncthreads();
    int n = (int)w->fibers.size();
    return op == 0 ? count : (op == 1 ? count == n : count > 0);
}
int __syncthreads_count(int predicate) { return block_vote(predicate, 0); }
int __syncthreads_and(int predicate) { return block_vote(predicate, 1); }
int __syncthreads_or(int predicate) { return block_vote(predicate, 2); }

void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ----------------------------------------------------------------------------
// warp collectives: every lane named in the mask must arrive at the same collective

static unsigned int warp_lane_mask(const Warp& wp) { return wp.lanes == 32 ? 0xFFFFFFFFu : ((1u << wp.lanes) - 1u); }

// arrive with `value`; returns once every lane of `mask` has arrived; the values are in slots[generation & 1]
static unsigned int warp_arrive(Worker* w, Fiber* f, unsigned int mask, uint64_t value, const char* what) {
    Warp& wp = w->warps[f->warp];
    if ((mask & ~warp_lane_mask(wp)) != 0) {
        cuda_cpu_fatal("%s with mask 0x%08x names lanes that do not exist (this warp has %d threads)", what, mask, wp.lanes);
    }
    if ((mask & (1u << f->lane)) == 0) { cuda_cpu_fatal("%s: lane %d is not in its own mask 0x%08x", what, f->lane, mask); }
    if ((mask & wp.done_mask) != 0) {
        cuda_cpu_fatal("%s with mask 0x%08x: lane %d named in the mask has already exited", what, mask, __builtin_ctz(mask & wp.done_mask));
    }
    if (wp.arrived == 0) {
        wp.mask = mask;
        wp.what = what;
        wp.expected = __builtin_popcount(mask);
    } else if (wp.mask != mask || (wp.what != what && strcmp(wp.what, what) != 0)) {
        cuda_cpu_fatal("divergent warp: lane %d calls %s (mask 0x%08x) while other lanes wait in %s (mask 0x%08x)", f->lane,
                       what, mask, wp.what, wp.mask);
    }
    const unsigned int generation = wp.generation;
    wp.slots[generation & 1][f->lane] = value;
    wp.arrived++;
    f->state = FIBER_WAIT_WARP;
    if (wp.arrived == wp.expected) {
        for (int l = 0; l < 32; l++) {
            if (mask & (1u << l)) { w->fibers[(size_t)(f->warp * 32 + l)].state = FIBER_READY; }
        }
        wp.arrived = 0;
        wp.generation++;
        wp.synced.push_back(mask);
    }
    switch_away(w, f);
    return generation;
}

uint64_t cuda_cpu_shfl(unsigned int mask, uint64_t bits, int op, int arg, int width, const char* what) {
    Worker* w = current_worker(what);
    Fiber* f = w->current;
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) { cuda_cpu_fatal("%s: width %d is not a power of two <= 32", what, width); }
    const int lane = f->lane, segment = lane & ~(width - 1);
    int src = lane;
    switch (op) {
        case CUDA_CPU_SHFL_IDX: src = segment + (arg & (width - 1)); break;
        case CUDA_CPU_SHFL_UP: src = lane - arg >= segment ? lane - arg : lane; break;
        case CUDA_CPU_SHFL_DOWN: src = lane + arg < segment + width ? lane + arg : lane; break;
        case CUDA_CPU_SHFL_XOR: {
            int x = lane ^ arg;
            src = (x & ~(width - 1)) > segment || x > 31 ? lane : x;  // later groups give the caller's own value
            break;
        }
    }
    unsigned int generation = warp_arrive(w, f, mask, bits, what);
    if ((mask & (1u << src)) == 0) {
        cuda_cpu_fatal("%s: lane %d reads lane %d, which is not in the mask 0x%08x (undefined in CUDA)", what, lane, src, mask);
    }
    return w->warps[f->warp].slots[generation & 1][src];
}

void __syncwarp(unsigned int mask) {
    Worker* w = current_worker("__syncwarp");
    warp_arrive(w, w->current, mask, 0, "__syncwarp");
}

unsigned int __ballot_sync(unsigned int mask, int predicate) {
    Worker* w = current_worker("__ballot_sync");
    Fiber* f = w->current;
    unsigned int generation = warp_arrive(w, f, mask, predicate != 0, "__ballot_sync");
    unsigned int ballot = 0;
    for (int l = 0; l < 32; l++) {
        if ((mask & (1u << l)) && w->warps[f->warp].slots[generation & 1][l]) { ballot |= 1u << l; }
    }
    return ballot;
}
int __all_sync(unsigned int mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }
int __any_sync(unsigned int mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
unsigned int __activemask(void) {
    Worker* w = current_worker("__activemask");
    const Warp& wp = w->warps[w->current->warp];
    return warp_lane_mask(wp) & ~wp.done_mask;
}

// ----------------------------------------------------------------------------
// running a block

// the bookkeeping of a thread that returned from the kernel
static void finish_thread(Worker* w, Fiber* f) {
    f->state = FIBER_DONE;
    w->live--;
    w->done++;
    Warp& wp = w->warps[f->warp];
    wp.done_mask |= 1u << f->lane;
    if (wp.arrived > 0 && (wp.mask & (1u << f->lane))) {
        cuda_cpu_fatal("lane %d exited while other lanes of its warp wait for it in %s (mask 0x%08x)", f->lane, wp.what, wp.mask);
    }
    if (w->block_arrived > 0) {
        cuda_cpu_fatal("exited while %d threads of the block wait at __syncthreads (a barrier inside divergent code is undefined in CUDA)",
                       w->block_arrived);
    }
}

// A fiber runs its thread; when the thread returns and the next thread in the scheduling order has not
// started, the fiber runs that one too, on the same stack: exactly what the scheduler would do next,
// without two stack switches per thread (most kernels never wait at a barrier).
extern "C" void cuda_cpu_fiber_main(void) {
    Worker* w = tl_worker;
    const size_t n = w->fibers.size();
    for (;;) {
        w->launch->invoke(w->launch->body);
        Fiber* f = w->current;
        finish_thread(w, f);
        const size_t pos = w->position + 1;
        if (pos >= n) { break; }
        Fiber* g = fiber_at(w, pos);
        if (g->state != FIBER_READY || g->sp != nullptr) { break; }
        g->stack = f->stack;
        g->sp = (void*)f;  // started (a real stack pointer is saved if it ever waits)
        w->current = g;
        w->position = pos;
        cuda_cpu_thread = &g->thread;
    }
    Fiber* last = w->current;
    w->free_stacks.push_back(last->stack);  // whoever starts on it next overwrites it; this fiber never resumes
    switch_away(w, last);
    cuda_cpu_fatal("a finished fiber was resumed");
}

static void report_deadlock(Worker* w) {
    int at_block = 0, at_warp = 0;
    const Fiber* example_block = nullptr;
    const Fiber* example_warp = nullptr;
    for (const Fiber& f : w->fibers) {
        if (f.state == FIBER_WAIT_BLOCK) { at_block++; example_block = &f; }
        if (f.state == FIBER_WAIT_WARP) { at_warp++; example_warp = &f; }
    }
    w->current = nullptr;
    const Launch* L = w->launch;
    cuda_cpu_fatal("kernel %s (%s:%d) block (%u,%u,%u) hangs: %d threads wait at __syncthreads (e.g. thread %u), %d in a warp "
                   "collective (e.g. thread %u in %s): threads of one warp or block wait at different barriers",
                   L->name, L->file, L->line, cuda_cpu_block_idx.x, cuda_cpu_block_idx.y, cuda_cpu_block_idx.z, at_block,
                   example_block ? example_block->thread.idx.x : 0u, at_warp, example_warp ? example_warp->thread.idx.x : 0u,
                   example_warp ? w->warps[example_warp->warp].what : "-");
}


static void run_block(Worker* w, Launch* L, unsigned long long linear_block) {
    const dim3 g = L->config.grid, b = L->config.block;
    cuda_cpu_block_idx = uint3{(unsigned)(linear_block % g.x), (unsigned)((linear_block / g.x) % g.y), (unsigned)(linear_block / ((unsigned long long)g.x * g.y))};
    const size_t n = (size_t)b.x * b.y * b.z;
    ensure_stacks(w, n);
    w->fibers.resize(n);
    for (size_t i = 0; i < n; i++) {
        Fiber& f = w->fibers[i];
        f.thread.idx = uint3{(unsigned)(i % b.x), (unsigned)((i / b.x) % b.y), (unsigned)(i / ((size_t)b.x * b.y))};
        f.sp = nullptr;
        f.stack = -1;
        f.state = FIBER_READY;
        f.warp = (int)(i / 32);
        f.lane = (int)(i % 32);
    }
    const size_t num_warps = (n + 31) / 32;
    w->warps.resize(num_warps);
    for (size_t k = 0; k < num_warps; k++) {
        Warp& wp = w->warps[k];
        wp.lanes = (int)(k + 1 < num_warps ? 32 : n - k * 32);
        wp.done_mask = 0;
        wp.arrived = 0;
        wp.mask = 0;
        wp.what = "";
        wp.generation = 0;
        wp.synced.clear();
    }
    w->live = (int)n;
    w->done = 0;
    w->block_arrived = 0;
    w->epoch = 0;
    w->unwritten = PendingRead{};
    w->free_stacks.clear();
    w->next_stack = 0;
    w->block_serial++;  // the static __shared__ variables are poisoned again when first declared
    reset_dynamic_shared(w, L->config.shared_bytes);
    // round robin in the scheduling order, from the fiber after the one that ran last
    size_t pos = 0;
    while (w->live > 0) {
        Fiber* g = nullptr;
        size_t p = pos;
        for (size_t tried = 0; tried < n; tried++, p++) {
            if (p >= n) { p = 0; }
            if (fiber_at(w, p)->state == FIBER_READY) {
                g = fiber_at(w, p);
                break;
            }
        }
        if (g == nullptr) {
            w->current = nullptr;
            report_deadlock(w);
        }
        void* sp = enter(w, g, p);
        cuda_cpu_swap(&w->scheduler_sp, sp);
        pos = w->position + 1;
    }
    if (w->unwritten.var != nullptr) { report_unwritten_read(w); }
    w->current = nullptr;
}

static void run_blocks(Worker* w, Launch* L) {
    w->launch = L;
    cuda_cpu_block_dim = uint3{L->config.block.x, L->config.block.y, L->config.block.z};
    cuda_cpu_grid_dim = uint3{L->config.grid.x, L->config.grid.y, L->config.grid.z};
    for (;;) {
        unsigned long long block = L->next_block.fetch_add(1);
        if (block >= L->total_blocks) { break; }
        run_block(w, L, block);
    }
    w->launch = nullptr;
}

// ----------------------------------------------------------------------------
// faults inside kernels: one line naming the kernel, block, thread and what the address is

static void fault_handler(int sig, siginfo_t* info, void* context) {
    const bool write = (((ucontext_t*)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;  // x86-64 page-fault error code
    if (sig == SIGSEGV && device_initcheck_fault(info->si_addr, write)) { return; }
    Worker* w = tl_worker;
    if (w == nullptr || w->launch == nullptr || w->current == nullptr) {
        signal(sig, SIG_DFL);  // a host-code crash: let it crash as it would without us
        return;
    }
    const void* addr = info->si_addr;
    char what[256];
    snprintf(what, sizeof(what), "%p is not device memory", addr);
    const size_t page = page_bytes();
    if ((uintptr_t)addr < 4096) {
        snprintf(what, sizeof(what), "%p: a NULL pointer", addr);
    } else if (w->stacks != nullptr && (char*)addr >= w->stacks && (char*)addr < w->stacks + w->stack_count * (STACK_BYTES + page)) {
        snprintf(what, sizeof(what), "stack overflow of a CUDA thread (%zu KiB per thread)", STACK_BYTES / 1024);
    } else if (g_mem_mutex.try_lock()) {
        for (const auto& kv : g_device) {
            const Allocation& al = kv.second;
            if ((char*)addr >= al.map && (char*)addr < al.map + al.map_bytes) {
                long long off = (long long)((const char*)addr - al.base);
                snprintf(what, sizeof(what), "%p is %s a device allocation of %zu bytes (offset %lld)", addr,
                         off < 0 ? "before" : "past the end of", al.bytes, off);
                break;
            }
        }
        g_mem_mutex.unlock();
    }
    cuda_cpu_fatal("invalid memory access: %s", what);
}

static void install_fault_handler_for_thread(Worker* w) {
    const size_t alt_bytes = 64 * 1024;
    w->altstack = (char*)malloc(alt_bytes);
    stack_t ss;
    ss.ss_sp = w->altstack;
    ss.ss_size = alt_bytes;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
}

static void install_fault_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

// ----------------------------------------------------------------------------
// the worker pool

struct Pool {
    std::mutex mutex;
    std::condition_variable start, finished;
    Launch* job = nullptr;
    unsigned long long generation = 0;
    int busy = 0;
    std::vector<std::thread> threads;
};
static Pool* g_pool = nullptr;
static int g_num_workers = 1;

static Worker* new_worker(void) {
    Worker* w = new Worker();
    install_fault_handler_for_thread(w);
    tl_worker = w;
    return w;
}

static void pool_thread(void) {
    Worker* w = new_worker();
    unsigned long long seen = 0;
    for (;;) {
        Launch* L;
        {
            std::unique_lock<std::mutex> lock(g_pool->mutex);
            g_pool->start.wait(lock, [&] { return g_pool->generation != seen; });
            seen = g_pool->generation;
            L = g_pool->job;
        }
        run_blocks(w, L);
        std::lock_guard<std::mutex> lock(g_pool->mutex);
        if (--g_pool->busy == 0) { g_pool->finished.notify_all(); }
    }
}

static int available_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) { return CPU_COUNT(&set); }
    return 1;
}

// CUDA_CPU_KERNEL_LOG=FILE: at exit, each kernel this process launched and how often, appended to FILE
// (one "name count program" line per kernel), to list what a test run executed
static std::mutex g_log_mutex;
static std::map<std::string, long long>* g_kernel_counts = nullptr;

static void write_kernel_log(void) {
    const char* path = getenv("CUDA_CPU_KERNEL_LOG");
    if (path == nullptr || g_kernel_counts == nullptr) { return; }
    FILE* f = fopen(path, "a");
    if (f == nullptr) { return; }
    char exe[512] = "?";
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[len > 0 ? len : 1] = '\0';
    std::lock_guard<std::mutex> lock(g_log_mutex);
    for (const auto& kv : *g_kernel_counts) { fprintf(f, "%s %lld %s\n", kv.first.c_str(), kv.second, exe); }
    fclose(f);
}

static void count_launch(const char* name) {
    if (g_kernel_counts == nullptr) { return; }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    (*g_kernel_counts)[name]++;
}

static void runtime_init_once(void) {
    static std::once_flag once;
    std::call_once(once, [] {
        install_fault_handlers();
        atexit(run_all_streams);  // work still queued at exit runs (and is checked) before the process ends
        if (getenv("CUDA_CPU_KERNEL_LOG") != nullptr) {
            g_kernel_counts = new std::map<std::string, long long>();
            atexit(write_kernel_log);
        }
        check_switches();
        const long long threads = cuda_cpu_switch("CUDA_CPU_THREADS");
        g_num_workers = threads > 0 ? (int)threads : available_cpus();
        g_reverse_order = cuda_cpu_switch("CUDA_CPU_ORDER") == 1;
        cuda_cpu_initcheck = (int)cuda_cpu_switch("CUDA_CPU_INITCHECK");
        g_device_initcheck = cuda_cpu_initcheck != 0;
        const long long stream_order = cuda_cpu_switch("CUDA_CPU_STREAM_ORDER");
        g_stream_order = stream_order != 0;
        g_streams_eager = stream_order == 2;
        cuda_cpu_racecheck = (int)cuda_cpu_switch("CUDA_CPU_RACECHECK");
        if (g_num_workers > 1) {
            g_pool = new Pool();
            for (int i = 0; i < g_num_workers - 1; i++) {
                g_pool->threads.emplace_back(pool_thread);
                g_pool->threads.back().detach();
            }
        }
    });
}

// ----------------------------------------------------------------------------
// launches

static bool launch_config_ok(const CudaCpuLaunchConfig& c, const char* name, const char* file, int line) {
    const dim3 g = c.grid, b = c.block;
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    const char* why = nullptr;
    char buf[256];
    if (threads == 0 || g.x == 0 || g.y == 0 || g.z == 0) {
        why = "an empty grid or block";
    } else if (threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) {
        snprintf(buf, sizeof(buf), "a block of (%u,%u,%u) threads: at most 1024 threads, 1024 x 1024 x 64", b.x, b.y, b.z);
        why = buf;
    } else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        snprintf(buf, sizeof(buf), "a grid of (%u,%u,%u) blocks: y and z at most 65535", g.x, g.y, g.z);
        why = buf;
    } else if (c.shared_bytes > (size_t)g_max_dynamic_shared.load()) {
        snprintf(buf, sizeof(buf), "%zu bytes of dynamic shared memory (48 KiB without cudaFuncSetAttribute)", c.shared_bytes);
        why = buf;
    } else if (c.stream != nullptr && !stream_ok(c.stream)) {
        why = "a stream that is not live";
    }
    if (why == nullptr) { return true; }
    fail(cudaErrorInvalidConfiguration, "launch of %s (%s:%d) refused: %s", name, file, line, why);
    return false;
}

static void check_pointer_args(const CudaCpuArgs& args, const char* name, const char* file, int line) {
    for (int i = 0; i < args.count; i++) {
        const void* p = args.ptr[i];
        if (p == nullptr) { continue; }
        bool ok;
        {
            std::lock_guard<std::mutex> lock(g_mem_mutex);
            ok = find_allocation_locked(p) != nullptr || is_pinned_locked(p);
        }
        if (!ok) {
            char desc[256];
            describe_pointer(desc, sizeof(desc), p);
            cuda_cpu_fatal("launch of %s (%s:%d): argument %d is %s", name, file, line, args.index[i] + 1, desc);
        }
    }
}

// runs a launch now, on this thread and the pool
static void run_launch(const CudaCpuLaunchConfig& config, const char* name, const char* file, int line, void (*invoke)(void*),
                       void* body) {
    Worker* self = tl_worker != nullptr ? tl_worker : new_worker();
    Launch L;
    L.config = config;
    L.name = name;
    L.file = file;
    L.line = line;
    L.invoke = invoke;
    L.body = body;
    L.total_blocks = (unsigned long long)config.grid.x * config.grid.y * config.grid.z;
    L.next_block.store(0);
    if (g_pool == nullptr || L.total_blocks == 1) {
        run_blocks(self, &L);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(g_pool->mutex);
        g_pool->job = &L;
        g_pool->busy = g_num_workers - 1;
        g_pool->generation++;
    }
    g_pool->start.notify_all();
    run_blocks(self, &L);
    std::unique_lock<std::mutex> lock(g_pool->mutex);
    g_pool->finished.wait(lock, [] { return g_pool->busy == 0; });
}

void cuda_cpu_run_kernel(const CudaCpuLaunchConfig& config, const char* name, const char* file, int line,
                         const CudaCpuArgs& args, void (*invoke)(void*), void* owner, void (*drop)(void*)) {
    runtime_init_once();
    if (tl_worker != nullptr && tl_worker->launch != nullptr) {
        cuda_cpu_fatal("launch of %s from device code (dynamic parallelism is not used by llmc)", name);
    }
    if (!launch_config_ok(config, name, file, line)) {
        drop(owner);
        return;
    }
    check_pointer_args(args, name, file, line);
    count_launch(name);
    char what[512];
    snprintf(what, sizeof(what), "kernel %s (%s:%d)", name, file, line);
    cuda_cpu_enqueue(config.stream, what, {}, [=]() {
        run_launch(config, name, file, line, invoke, owner);
        drop(owner);
    });
    if (g_stream_order) {  // the device memory it uses, for the stream-order checks
        std::vector<CudaCpuUse> uses;
        for (int i = 0; i < args.count; i++) { uses.push_back(CudaCpuUse{args.ptr[i], args.writes[i], 0}); }
        note_uses(&resolve(config.stream)->queue.back(), uses.data(), uses.size());
    }
}
