/*
llmc/opencl/opencl_common.h: the OpenCL runtime for the OpenCL trainer (train_gpt2cl.c): devices, errors,
programs, buffers and kernel launches. Plain C over the OpenCL 1.2 API (ocl-icd + any driver: PoCL on
a CPU, the AMD, Intel or NVIDIA GPU drivers).

    clCheck(call)                         a failed call dies with one line: the call, file:line, the
                                          error's name and number
    cl_list_devices(out)                  every platform and device with its index (-cl 1)
    cl_device_init(dev, platform, device) a context and an in-order queue on device `device` of
                                          platform `platform` (-cp, -cd); a bad index is one line
    cl_program_build(dev, source, what)   compiled for the device; a compile error is one line with the log
    cl_kernel_get(program, name)          one kernel of a program
    ClTensor                              a buffer and an element offset into it: the trainer keeps its
                                          parameters, gradients and activations in one buffer each
    cl_alloc, cl_write, cl_read, cl_fill_zero    buffers of floats (or bytes), blocking copies
    cl_read_tensor, cl_write_tensor       n floats from or to a tensor
    cl_launch(dev, kernel, n, cl_t(out), cl_i(C), ...)
                                          sets a kernel's arguments in order (cl_t a tensor, cl_m a
                                          buffer, cl_i int, cl_u ulong, cl_f float) and enqueues it over
                                          n work items in work groups of CL_WORK_GROUP (n rounded up:
                                          every kernel guards its id); cl_set_args(kernel, CL_ARGS(...))
                                          only sets them, for a launch of another shape

Every kernel of llmc/opencl/NAME.cl takes a tensor as two arguments, (__global float* x, ulong x_off).
*/
#ifndef LLMC_OPENCL_COMMON_H
#define LLMC_OPENCL_COMMON_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"

#define CL_WORK_GROUP 64

static const char* cl_error_name(cl_int err) {
    switch (err) {
#define CL_ERR_(name) case name: return #name;
        CL_ERR_(CL_SUCCESS) CL_ERR_(CL_DEVICE_NOT_FOUND) CL_ERR_(CL_DEVICE_NOT_AVAILABLE)
        CL_ERR_(CL_COMPILER_NOT_AVAILABLE) CL_ERR_(CL_MEM_OBJECT_ALLOCATION_FAILURE) CL_ERR_(CL_OUT_OF_RESOURCES)
        CL_ERR_(CL_OUT_OF_HOST_MEMORY) CL_ERR_(CL_PROFILING_INFO_NOT_AVAILABLE) CL_ERR_(CL_MEM_COPY_OVERLAP)
        CL_ERR_(CL_IMAGE_FORMAT_MISMATCH) CL_ERR_(CL_IMAGE_FORMAT_NOT_SUPPORTED) CL_ERR_(CL_BUILD_PROGRAM_FAILURE)
        CL_ERR_(CL_MAP_FAILURE) CL_ERR_(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        CL_ERR_(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) CL_ERR_(CL_COMPILE_PROGRAM_FAILURE)
        CL_ERR_(CL_LINKER_NOT_AVAILABLE) CL_ERR_(CL_LINK_PROGRAM_FAILURE) CL_ERR_(CL_DEVICE_PARTITION_FAILED)
        CL_ERR_(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) CL_ERR_(CL_INVALID_VALUE) CL_ERR_(CL_INVALID_DEVICE_TYPE)
        CL_ERR_(CL_INVALID_PLATFORM) CL_ERR_(CL_INVALID_DEVICE) CL_ERR_(CL_INVALID_CONTEXT)
        CL_ERR_(CL_INVALID_QUEUE_PROPERTIES) CL_ERR_(CL_INVALID_COMMAND_QUEUE) CL_ERR_(CL_INVALID_HOST_PTR)
        CL_ERR_(CL_INVALID_MEM_OBJECT) CL_ERR_(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) CL_ERR_(CL_INVALID_IMAGE_SIZE)
        CL_ERR_(CL_INVALID_SAMPLER) CL_ERR_(CL_INVALID_BINARY) CL_ERR_(CL_INVALID_BUILD_OPTIONS)
        CL_ERR_(CL_INVALID_PROGRAM) CL_ERR_(CL_INVALID_PROGRAM_EXECUTABLE) CL_ERR_(CL_INVALID_KERNEL_NAME)
        CL_ERR_(CL_INVALID_KERNEL_DEFINITION) CL_ERR_(CL_INVALID_KERNEL) CL_ERR_(CL_INVALID_ARG_INDEX)
        CL_ERR_(CL_INVALID_ARG_VALUE) CL_ERR_(CL_INVALID_ARG_SIZE) CL_ERR_(CL_INVALID_KERNEL_ARGS)
        CL_ERR_(CL_INVALID_WORK_DIMENSION) CL_ERR_(CL_INVALID_WORK_GROUP_SIZE) CL_ERR_(CL_INVALID_WORK_ITEM_SIZE)
        CL_ERR_(CL_INVALID_GLOBAL_OFFSET) CL_ERR_(CL_INVALID_EVENT_WAIT_LIST) CL_ERR_(CL_INVALID_EVENT)
        CL_ERR_(CL_INVALID_OPERATION) CL_ERR_(CL_INVALID_GL_OBJECT) CL_ERR_(CL_INVALID_BUFFER_SIZE)
        CL_ERR_(CL_INVALID_MIP_LEVEL) CL_ERR_(CL_INVALID_GLOBAL_WORK_SIZE) CL_ERR_(CL_INVALID_PROPERTY)
        CL_ERR_(CL_INVALID_IMAGE_DESCRIPTOR) CL_ERR_(CL_INVALID_COMPILER_OPTIONS) CL_ERR_(CL_INVALID_LINKER_OPTIONS)
        CL_ERR_(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef CL_ERR_
        case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
        default: return "unknown OpenCL error";
    }
}

// "clEnqueueNDRangeKernel(q, k, ...)" -> "clEnqueueNDRangeKernel"
static void cl_check_(cl_int err, const char* call, const char* file, int line) {
    if (err == CL_SUCCESS) { return; }
    char name[96];
    size_t n = strcspn(call, "(");
    if (n >= sizeof(name)) { n = sizeof(name) - 1; }
    memcpy(name, call, n);
    name[n] = '\0';
    llmc_die("OpenCL call %s failed at %s:%d: %s (%d)", name, file, line, cl_error_name(err), (int)err);
}
#define clCheck(call) cl_check_((call), #call, __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// platforms and devices

// the platforms (at most 64); dies with one line when there is none
static cl_uint cl_platforms(cl_platform_id* out) {
    cl_uint n = 0;
    cl_int err = clGetPlatformIDs(64, out, &n);
    if (err == -1001 || (err == CL_SUCCESS && n == 0)) {
        llmc_die("no OpenCL platform found (install a driver: apt-get install pocl-opencl-icd runs OpenCL on the CPU; "
                 "make system-packages does it)");
    }
    clCheck(err);
    return n > 64 ? 64 : n;
}

static cl_uint cl_devices(cl_platform_id p, cl_device_id* out) {
    cl_uint n = 0;
    cl_int err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 64, out, &n);
    if (err == CL_DEVICE_NOT_FOUND) { return 0; }
    clCheck(err);
    return n > 64 ? 64 : n;
}

static void cl_platform_name(cl_platform_id p, char* buf, size_t size) {
    clCheck(clGetPlatformInfo(p, CL_PLATFORM_NAME, size, buf, NULL));
}

static void cl_device_string(cl_device_id d, cl_device_info what, char* buf, size_t size) {
    clCheck(clGetDeviceInfo(d, what, size, buf, NULL));
}

static const char* cl_device_type_name(cl_device_id d) {
    cl_device_type t;
    clCheck(clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(t), &t, NULL));
    if (t & CL_DEVICE_TYPE_GPU) { return "GPU"; }
    if (t & CL_DEVICE_TYPE_CPU) { return "CPU"; }
    if (t & CL_DEVICE_TYPE_ACCELERATOR) { return "accelerator"; }
    return "other";
}

// why a device cannot run the trainer ("" when it can): it needs OpenCL C 1.2 and work groups of 256
static const char* cl_device_unusable(const char* c_version, size_t max_work_group) {
    int major = 0, minor = 0;
    if (sscanf(c_version, "OpenCL C %d.%d", &major, &minor) != 2 || major * 10 + minor < 12) {
        return "needs OpenCL C 1.2";
    }
    if (max_work_group < 256) { return "needs work groups of 256"; }
    return "";
}

// -cl 1: one line per platform, one per device under it (saying whether the trainer can use it)
static void cl_list_devices(FILE* out) {
    cl_platform_id ps[64];
    cl_uint np = cl_platforms(ps);
    for (cl_uint i = 0; i < np; i++) {
        char name[256];
        cl_platform_name(ps[i], name, sizeof(name));
        fprintf(out, "platform %u (-cp %u): %s\n", i, i, name);
        cl_device_id ds[64];
        cl_uint nd = cl_devices(ps[i], ds);
        for (cl_uint j = 0; j < nd; j++) {
            char dname[256], version[256];
            cl_ulong mem;
            size_t wg;
            cl_device_string(ds[j], CL_DEVICE_NAME, dname, sizeof(dname));
            cl_device_string(ds[j], CL_DEVICE_OPENCL_C_VERSION, version, sizeof(version));
            clCheck(clGetDeviceInfo(ds[j], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, NULL));
            clCheck(clGetDeviceInfo(ds[j], CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(wg), &wg, NULL));
            const char* why = cl_device_unusable(version, wg);
            fprintf(out, "  device %u (-cp %u -cd %u): %s [%s], %s, %.1f GiB, max work group %zu: %s%s\n", j, i, j, dname,
                    cl_device_type_name(ds[j]), version, (double)mem / (1024.0 * 1024.0 * 1024.0), wg,
                    why[0] == '\0' ? "usable" : "not usable, ", why);
        }
        if (nd == 0) { fprintf(out, "  (no devices)\n"); }
    }
}

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    char platform_name[256];
    char device_name[256];
    cl_ulong max_alloc;      // CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest one buffer
    size_t max_work_group;
} ClDevice;

static void cl_device_init(ClDevice* dev, int platform_index, int device_index) {
    memset(dev, 0, sizeof(*dev));
    cl_platform_id ps[64];
    cl_uint np = cl_platforms(ps);
    if (platform_index < 0 || (cl_uint)platform_index >= np) {
        llmc_die("flag -cp: no OpenCL platform %d: there %s %u (run with -cl 1 to list them)", platform_index,
                 np == 1 ? "is" : "are", np);
    }
    dev->platform = ps[platform_index];
    cl_platform_name(dev->platform, dev->platform_name, sizeof(dev->platform_name));
    cl_device_id ds[64];
    cl_uint nd = cl_devices(dev->platform, ds);
    if (device_index < 0 || (cl_uint)device_index >= nd) {
        llmc_die("flag -cd: no OpenCL device %d on platform %d (%s): it has %u (run with -cl 1 to list them)",
                 device_index, platform_index, dev->platform_name, nd);
    }
    dev->device = ds[device_index];
    cl_device_string(dev->device, CL_DEVICE_NAME, dev->device_name, sizeof(dev->device_name));
    clCheck(clGetDeviceInfo(dev->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(dev->max_alloc), &dev->max_alloc, NULL));
    clCheck(clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(dev->max_work_group), &dev->max_work_group, NULL));
    char c_version[256];
    cl_device_string(dev->device, CL_DEVICE_OPENCL_C_VERSION, c_version, sizeof(c_version));
    const char* why = cl_device_unusable(c_version, dev->max_work_group);
    if (why[0] != '\0') {
        llmc_die("OpenCL device %s (%s, work groups of at most %zu) cannot run the trainer: it %s", dev->device_name,
                 c_version, dev->max_work_group, why);
    }
    cl_int err;
    dev->context = clCreateContext(NULL, 1, &dev->device, NULL, NULL, &err);
    clCheck(err);
    dev->queue = clCreateCommandQueue(dev->context, dev->device, 0, &err);
    clCheck(err);
}

static void cl_device_free(ClDevice* dev) {
    if (dev->queue != NULL) { clReleaseCommandQueue(dev->queue); }
    if (dev->context != NULL) { clReleaseContext(dev->context); }
    memset(dev, 0, sizeof(*dev));
}

// compiles source for the device; a compile error dies with one line holding the start of the log
static cl_program cl_program_build(const ClDevice* dev, const char* source, const char* what) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(dev->context, 1, &source, NULL, &err);
    clCheck(err);
    err = clBuildProgram(p, 1, &dev->device, "-cl-std=CL1.2", NULL, NULL);
    if (err == CL_BUILD_PROGRAM_FAILURE) {
        char log[4096];
        size_t n = 0;
        clGetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, &n);
        log[n < sizeof(log) ? n : sizeof(log) - 1] = '\0';
        llmc_die("OpenCL: %s do not compile for %s: %s", what, dev->device_name, log);
    }
    clCheck(err);
    return p;
}

static cl_kernel cl_kernel_get(cl_program p, const char* name) {
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS) { llmc_die("OpenCL: kernel %s: %s (%d)", name, cl_error_name(err), (int)err); }
    return k;
}

// ----------------------------------------------------------------------------
// buffers

typedef struct {
    cl_mem mem;
    size_t off; // in elements
} ClTensor;

static inline ClTensor cl_at(ClTensor t, size_t elements) {
    t.off += elements;
    return t;
}

static cl_mem cl_alloc(const ClDevice* dev, size_t bytes, const char* what) {
    if (bytes == 0) { bytes = 4; }
    if ((cl_ulong)bytes > dev->max_alloc) {
        llmc_die("OpenCL device %s: %s needs one buffer of %.1f MiB, the device allows %.1f MiB (use a smaller -b or -t)",
                 dev->device_name, what, bytes / 1048576.0, dev->max_alloc / 1048576.0);
    }
    cl_int err;
    cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    clCheck(err);
    return m;
}

static void cl_write(const ClDevice* dev, cl_mem m, size_t offset_bytes, const void* src, size_t bytes) {
    if (bytes > 0) { clCheck(clEnqueueWriteBuffer(dev->queue, m, CL_TRUE, offset_bytes, bytes, src, 0, NULL, NULL)); }
}

static void cl_read(const ClDevice* dev, cl_mem m, size_t offset_bytes, void* dst, size_t bytes) {
    if (bytes > 0) { clCheck(clEnqueueReadBuffer(dev->queue, m, CL_TRUE, offset_bytes, bytes, dst, 0, NULL, NULL)); }
}

static void cl_fill_zero(const ClDevice* dev, cl_mem m, size_t bytes) {
    float zero = 0.0f;
    if (bytes > 0) { clCheck(clEnqueueFillBuffer(dev->queue, m, &zero, sizeof(zero), 0, bytes, 0, NULL, NULL)); }
}

// n floats from or to the tensor t
static void cl_read_tensor(const ClDevice* dev, ClTensor t, float* dst, size_t n) {
    cl_read(dev, t.mem, t.off * sizeof(float), dst, n * sizeof(float));
}

static void cl_write_tensor(const ClDevice* dev, ClTensor t, const float* src, size_t n) {
    cl_write(dev, t.mem, t.off * sizeof(float), src, n * sizeof(float));
}

// ----------------------------------------------------------------------------
// kernel launches: cl_launch(dev, kernel, n, cl_t(out), cl_t(inp), cl_i(C), ...)

// one argument of a kernel, typed by its constructor: cl_t a tensor (two kernel arguments, the
// buffer and its ulong offset), cl_m a buffer, cl_i an int, cl_u a ulong, cl_f a float
typedef struct {
    enum { CL_ARG_TENSOR, CL_ARG_MEM, CL_ARG_INT, CL_ARG_ULONG, CL_ARG_FLOAT } kind;
    union {
        ClTensor t;
        cl_mem m;
        cl_int i;
        cl_ulong u;
        cl_float f;
    } v;
} ClArg;

static inline ClArg cl_t(ClTensor t) { ClArg a = {CL_ARG_TENSOR, {.t = t}}; return a; }
static inline ClArg cl_m(cl_mem m) { ClArg a = {CL_ARG_MEM, {.m = m}}; return a; }
static inline ClArg cl_i(int v) { ClArg a = {CL_ARG_INT, {.i = v}}; return a; }
static inline ClArg cl_u(size_t v) { ClArg a = {CL_ARG_ULONG, {.u = (cl_ulong)v}}; return a; }
static inline ClArg cl_f(float v) { ClArg a = {CL_ARG_FLOAT, {.f = v}}; return a; }

// a list of ClArg as the two arguments (array, count) of cl_set_args
#define CL_ARGS(...) (const ClArg[]){__VA_ARGS__}, sizeof((const ClArg[]){__VA_ARGS__}) / sizeof(ClArg)

// sets the kernel's arguments in order, from the first
static void cl_set_args(cl_kernel k, const ClArg* args, size_t nargs) {
    cl_uint n = 0;
    for (size_t i = 0; i < nargs; i++) {
        const ClArg* a = &args[i];
        switch (a->kind) {
            case CL_ARG_TENSOR: {
                cl_ulong off = (cl_ulong)a->v.t.off;
                clCheck(clSetKernelArg(k, n++, sizeof(cl_mem), &a->v.t.mem));
                clCheck(clSetKernelArg(k, n++, sizeof(off), &off));
                break;
            }
            case CL_ARG_MEM: clCheck(clSetKernelArg(k, n++, sizeof(cl_mem), &a->v.m)); break;
            case CL_ARG_INT: clCheck(clSetKernelArg(k, n++, sizeof(cl_int), &a->v.i)); break;
            case CL_ARG_ULONG: clCheck(clSetKernelArg(k, n++, sizeof(cl_ulong), &a->v.u)); break;
            case CL_ARG_FLOAT: clCheck(clSetKernelArg(k, n++, sizeof(cl_float), &a->v.f)); break;
        }
    }
}

// sets the arguments and enqueues the kernel over n work items (n rounded up to a multiple of CL_WORK_GROUP)
static void cl_launch_args(const ClDevice* dev, cl_kernel k, size_t n, const ClArg* args, size_t nargs) {
    if (n == 0) { return; }
    cl_set_args(k, args, nargs);
    size_t local = CL_WORK_GROUP;
    size_t global = (n + local - 1) / local * local;
    clCheck(clEnqueueNDRangeKernel(dev->queue, k, 1, NULL, &global, &local, 0, NULL, NULL));
}
#define cl_launch(dev, kernel, n, ...) cl_launch_args((dev), (kernel), (n), CL_ARGS(__VA_ARGS__))

#endif // LLMC_OPENCL_COMMON_H
