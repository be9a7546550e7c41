/*
 * fakenvml: a stand-in for libnvidia-ml.so.1 that simulates GPUs for tests and demos.
 *
 * Build:  cc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fakenvml.c -lpthread
 *
 * The simulated machine is described by a line-oriented state file whose path is read
 * from the environment variable FAKE_NVML_STATE at every call; the file is re-parsed
 * whenever its inode, size or modification time changes, so a test (or the demo helper)
 * can rewrite it while a process keeps the library loaded. Format, one key=value a line
 * ('#' starts a comment):
 *
 *   driver_version=565.57.01
 *   nvml_version=12.565.57.01
 *   device.0.name=NVIDIA A100-SXM4-80GB
 *   device.0.uuid=GPU-00000000-0000-0000-0000-000000000000
 *   device.0.memory_total=85899345920       (bytes)
 *   device.0.memory_reserved=0              (bytes; counted in 'used')
 *   device.0.memory_used=...                (bytes; default: reserved + its processes)
 *   device.0.utilization_gpu=12             (percent)
 *   device.0.utilization_memory=5           (percent)
 *   device.0.mig_mode=1                     (absent: the device is not MIG-capable)
 *   device.0.mig.0.gpu_instance_id=1
 *   device.0.mig.0.uuid=MIG-...
 *   device.0.mig.0.name=NVIDIA A100-SXM4-80GB MIG 1g.10gb
 *   device.0.mig.0.memory_total=10737418240
 *   process=0:1234:1073741824               (device[/mig slot]:pid:bytes or 'na'[:graphics])
 *   utilization=0:1234:35                   (device:pid:SM percent[:memory percent][@FROM[-TO]]:
 *                                            the process is busy at every sampling tick from FROM
 *                                            to TO, CPU epoch microseconds; without '@', at every
 *                                            tick; see "Per-process utilisation" below)
 *   utilization_period_us=138889            (the driver's sampling period; default 10 s / 72)
 *   utilization_buffer=72                   (ticks the driver keeps; default 72: about 10 s)
 *   host_pid_offset=100000                  (drivers before 570.86.15 put host pids in utilisation
 *                                            samples: a container's pid plus this; default 0)
 *   error.nvmlDeviceGetCount_v2=999         (that call returns this NVML return code)
 *   release_exited=1                        (processes that no longer exist hold no memory,
 *                                            as with a real driver; default 0 keeps them)
 *
 * Per-process utilisation, as the driver keeps it: it samples the engines every period (ticks at
 * multiples of the period on the CPU's epoch clock, in microseconds) into a ring of the last
 * `utilization_buffer` ticks, so samples older than about 10 s are gone. A query answers one
 * sample per process that was busy (any non-zero utilisation) at some tick in the ring newer than
 * lastSeenTimeStamp, stamped with the newest such tick; with none, NVML_ERROR_NOT_FOUND. A GPU in
 * MIG mode and its instances answer NVML_ERROR_NOT_SUPPORTED.
 *
 * Only the NVML functions the fracnb meter (and common tools) call are implemented.
 * Everything here is written for this project from the public NVML API description.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define MAX_DEVICES 16
#define MAX_MIG 7
#define MAX_PROCS 4096
#define MAX_ERRORS 64
#define TEXT 96
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define NO_INSTANCE 0xFFFFFFFFU
#define MEMORY_V2 0x02000028U

typedef int nvmlReturn_t;
typedef struct fake_handle *nvmlDevice_t;
typedef unsigned long long u64;

typedef struct { u64 total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; u64 total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int pid; u64 usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    u64 usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

struct mig {
    int present;
    unsigned int gpu_instance_id;
    char name[TEXT], uuid[TEXT];
    u64 total;
};

struct device {
    char name[TEXT], uuid[TEXT];
    u64 total, reserved, used;
    int used_set, mig_capable, mig_mode;
    unsigned int util_gpu, util_memory;
    struct mig mig[MAX_MIG];
};

struct proc {
    int device, mig, graphics, memory_known;
    unsigned int pid;
    u64 memory;
};

struct sample {
    int device;
    unsigned int pid, sm, mem;
    u64 from, to; /* CPU epoch microseconds; to 0: still busy */
};

struct failure {
    char call[64];
    int code;
};

struct state {
    char driver_version[80], nvml_version[80];
    int device_count, proc_count, failure_count, release_exited, sample_count;
    u64 util_period_us;
    unsigned int util_buffer, host_pid_offset;
    struct device devices[MAX_DEVICES];
    struct proc procs[MAX_PROCS];
    struct sample samples[MAX_PROCS];
    struct failure failures[MAX_ERRORS];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct state st;
static int loaded;
static struct stat loaded_stat;
static char loaded_path[4096];
static int init_count;

const char *fakenvml_version(void) { return "fakenvml 1"; }

/* Copy with truncation to the destination's size (state values are short by contract). */
static void copy_text(char *dst, size_t size, const char *src) {
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static int parse_index(const char **p, int limit) {
    char *end;
    long value = strtol(*p, &end, 10);
    if (end == *p || *end != '.' || value < 0 || value >= limit) return -1;
    *p = end + 1;
    return (int)value;
}

static void set_device_field(struct device *d, const char *field, const char *value) {
    if (!strcmp(field, "name")) copy_text(d->name, TEXT, value);
    else if (!strcmp(field, "uuid")) copy_text(d->uuid, TEXT, value);
    else if (!strcmp(field, "memory_total")) d->total = strtoull(value, NULL, 10);
    else if (!strcmp(field, "memory_reserved")) d->reserved = strtoull(value, NULL, 10);
    else if (!strcmp(field, "memory_used")) {
        d->used = strtoull(value, NULL, 10);
        d->used_set = 1;
    } else if (!strcmp(field, "utilization_gpu")) d->util_gpu = (unsigned)atoi(value);
    else if (!strcmp(field, "utilization_memory")) d->util_memory = (unsigned)atoi(value);
    else if (!strcmp(field, "mig_mode")) {
        d->mig_capable = 1;
        d->mig_mode = atoi(value);
    }
}

static void set_mig_field(struct mig *m, const char *field, const char *value) {
    m->present = 1;
    if (!strcmp(field, "gpu_instance_id")) m->gpu_instance_id = (unsigned)atoi(value);
    else if (!strcmp(field, "name")) copy_text(m->name, TEXT, value);
    else if (!strcmp(field, "uuid")) copy_text(m->uuid, TEXT, value);
    else if (!strcmp(field, "memory_total")) m->total = strtoull(value, NULL, 10);
}

static void parse_device_key(const char *key, const char *value) {
    const char *p = key + strlen("device.");
    int index = parse_index(&p, MAX_DEVICES);
    if (index < 0) return;
    if (index + 1 > st.device_count) st.device_count = index + 1;
    if (!strncmp(p, "mig.", 4)) {
        p += 4;
        int slot = parse_index(&p, MAX_MIG);
        if (slot >= 0) set_mig_field(&st.devices[index].mig[slot], p, value);
        return;
    }
    set_device_field(&st.devices[index], p, value);
}

/* process=DEVICE[/MIG]:PID:BYTES|na[:graphics] */
static void parse_process(const char *value) {
    if (st.proc_count >= MAX_PROCS) return;
    struct proc *pr = &st.procs[st.proc_count];
    memset(pr, 0, sizeof *pr);
    pr->mig = -1;
    char *end;
    pr->device = (int)strtol(value, &end, 10);
    if (*end == '/') pr->mig = (int)strtol(end + 1, &end, 10);
    if (*end != ':' || pr->device < 0 || pr->device >= MAX_DEVICES || pr->mig >= MAX_MIG) return;
    pr->pid = (unsigned)strtoul(end + 1, &end, 10);
    if (*end != ':') return;
    const char *mem = end + 1;
    if (!strncmp(mem, "na", 2)) {
        end = (char *)mem + 2;
    } else {
        pr->memory = strtoull(mem, &end, 10);
        pr->memory_known = 1;
    }
    pr->graphics = !strcmp(end, ":graphics");
    st.proc_count++;
}

/* utilization=DEVICE:PID:SM_PERCENT[:MEMORY_PERCENT][@FROM[-TO]] */
static void parse_sample(const char *value) {
    if (st.sample_count >= MAX_PROCS) return;
    struct sample *sa = &st.samples[st.sample_count];
    memset(sa, 0, sizeof *sa);
    char *end;
    sa->device = (int)strtol(value, &end, 10);
    if (*end != ':' || sa->device < 0 || sa->device >= MAX_DEVICES) return;
    sa->pid = (unsigned)strtoul(end + 1, &end, 10);
    if (*end != ':') return;
    sa->sm = (unsigned)strtoul(end + 1, &end, 10);
    if (*end == ':') sa->mem = (unsigned)strtoul(end + 1, &end, 10);
    if (*end == '@') {
        sa->from = strtoull(end + 1, &end, 10);
        if (*end == '-') sa->to = strtoull(end + 1, &end, 10);
    }
    if (*end) return;
    st.sample_count++;
}

static void parse_line(char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    char *eq = strchr(line, '=');
    if (!eq) return;
    *eq = 0;
    const char *key = line, *value = eq + 1;
    if (!strcmp(key, "driver_version")) copy_text(st.driver_version, 80, value);
    else if (!strcmp(key, "nvml_version")) copy_text(st.nvml_version, 80, value);
    else if (!strcmp(key, "release_exited")) st.release_exited = atoi(value) != 0;
    else if (!strcmp(key, "utilization_period_us")) st.util_period_us = strtoull(value, NULL, 10);
    else if (!strcmp(key, "utilization_buffer")) st.util_buffer = (unsigned)strtoul(value, NULL, 10);
    else if (!strcmp(key, "host_pid_offset")) st.host_pid_offset = (unsigned)strtoul(value, NULL, 10);
    else if (!strncmp(key, "device.", 7)) parse_device_key(key, value);
    else if (!strcmp(key, "process")) parse_process(value);
    else if (!strcmp(key, "utilization")) parse_sample(value);
    else if (!strncmp(key, "error.", 6) && st.failure_count < MAX_ERRORS) {
        struct failure *f = &st.failures[st.failure_count++];
        copy_text(f->call, sizeof f->call, key + 6);
        f->code = atoi(value);
    }
}

/* Reload the state file if it changed; returns 0 when no usable state exists. */
static int refresh_state(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat now;
    if (!path || !*path || stat(path, &now) != 0) {
        loaded = 0;
        return 0;
    }
    if (loaded && !strcmp(path, loaded_path) && now.st_ino == loaded_stat.st_ino &&
        now.st_size == loaded_stat.st_size && now.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
        return 1;
    FILE *f = fopen(path, "r");
    if (!f) {
        loaded = 0;
        return 0;
    }
    memset(&st, 0, sizeof st);
    copy_text(st.driver_version, 80, "565.57.01");
    copy_text(st.nvml_version, 80, "12.565.57.01");
    st.util_period_us = 10000000ULL / 72; /* the RM ring: 72 samples over 10 s */
    st.util_buffer = 72;
    char line[1024];
    while (fgets(line, sizeof line, f)) parse_line(line);
    fclose(f);
    if (st.util_period_us == 0) st.util_period_us = 1;
    if (st.util_buffer == 0) st.util_buffer = 1;
    loaded = 1;
    loaded_stat = now;
    copy_text(loaded_path, sizeof loaded_path, path);
    return 1;
}

static int injected_failure(const char *call) {
    for (int i = 0; i < st.failure_count; i++)
        if (!strcmp(st.failures[i].call, call)) return st.failures[i].code;
    return NVML_SUCCESS;
}

/* Common prologue: take the lock, refresh the state, honour injected failures. */
static nvmlReturn_t enter(const char *call, int needs_init) {
    pthread_mutex_lock(&lock);
    if (!refresh_state()) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (needs_init && init_count == 0) return NVML_ERROR_UNINITIALIZED;
    return injected_failure(call);
}

static nvmlReturn_t leave(nvmlReturn_t code) {
    pthread_mutex_unlock(&lock);
    return code;
}

#define ENTER(call)                                   \
    do {                                              \
        nvmlReturn_t entered_ = enter(call, 1);       \
        if (entered_ != NVML_SUCCESS) return leave(entered_); \
    } while (0)

/* Handles: device i is (i+1); MIG slot m of device i is (i+1)*100 + m + 1. Never NULL. */
static nvmlDevice_t device_handle(int device) { return (nvmlDevice_t)(long)(device + 1); }
static nvmlDevice_t mig_handle(int device, int slot) {
    return (nvmlDevice_t)(long)((device + 1) * 100 + slot + 1);
}

/* Decode a handle into device index and MIG slot (-1 for a whole device). */
static int decode(nvmlDevice_t handle, int *device, int *slot) {
    long value = (long)handle;
    if (value >= 1 && value <= st.device_count) {
        *device = (int)value - 1;
        *slot = -1;
        return 1;
    }
    if (value > 100) {
        int d = (int)(value / 100) - 1, m = (int)(value % 100) - 1;
        if (d >= 0 && d < st.device_count && m >= 0 && m < MAX_MIG &&
            st.devices[d].mig_mode == 1 && st.devices[d].mig[m].present) {
            *device = d;
            *slot = m;
            return 1;
        }
    }
    return 0;
}

#define DECODE(handle, device, slot) \
    if (!decode(handle, &device, &slot)) return leave(NVML_ERROR_INVALID_ARGUMENT)

static nvmlReturn_t put_text(char *dst, unsigned int length, const char *text) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

/* ---- init / system ----------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t code = enter("nvmlInitWithFlags", 0);
    if (code == NVML_SUCCESS) init_count++;
    return leave(code);
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    if (init_count == 0) return leave(NVML_ERROR_UNINITIALIZED);
    init_count--;
    return leave(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t code) {
    switch (code) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER("nvmlSystemGetDriverVersion");
    return leave(put_text(version, length, st.driver_version));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    ENTER("nvmlSystemGetNVMLVersion");
    return leave(put_text(version, length, st.nvml_version));
}

/* ---- devices --------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER("nvmlDeviceGetCount_v2");
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = (unsigned)st.device_count;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER("nvmlDeviceGetHandleByIndex_v2");
    if (!device || index >= (unsigned)st.device_count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *device = device_handle((int)index);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER("nvmlDeviceGetHandleByUUID");
    if (!uuid || !device) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (int d = 0; d < st.device_count; d++) {
        if (!strcmp(st.devices[d].uuid, uuid)) {
            *device = device_handle(d);
            return leave(NVML_SUCCESS);
        }
        for (int m = 0; m < MAX_MIG; m++) {
            struct mig *mg = &st.devices[d].mig[m];
            if (st.devices[d].mig_mode == 1 && mg->present && !strcmp(mg->uuid, uuid)) {
                *device = mig_handle(d, m);
                return leave(NVML_SUCCESS);
            }
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t handle, char *name, unsigned int length) {
    ENTER("nvmlDeviceGetName");
    int d, m;
    DECODE(handle, d, m);
    return leave(put_text(name, length, m < 0 ? st.devices[d].name : st.devices[d].mig[m].name));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t handle, char *uuid, unsigned int length) {
    ENTER("nvmlDeviceGetUUID");
    int d, m;
    DECODE(handle, d, m);
    return leave(put_text(uuid, length, m < 0 ? st.devices[d].uuid : st.devices[d].mig[m].uuid));
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t handle, unsigned int *index) {
    ENTER("nvmlDeviceGetIndex");
    int d, m;
    DECODE(handle, d, m);
    if (!index) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned)d;
    return leave(NVML_SUCCESS);
}

/* ---- memory and utilisation ----------------------------------------------------- */

/* A real driver frees a process's memory when it exits; with release_exited=1 so do we. */
static int process_alive(const struct proc *p) {
    return !st.release_exited || kill((pid_t)p->pid, 0) == 0 || errno != ESRCH;
}

static u64 process_memory(int d, int m) {
    u64 sum = 0;
    for (int i = 0; i < st.proc_count; i++) {
        struct proc *p = &st.procs[i];
        if (p->device == d && (m < 0 || p->mig == m) && p->memory_known && process_alive(p)) sum += p->memory;
    }
    return sum;
}

static void memory_of(int d, int m, u64 *total, u64 *reserved, u64 *used) {
    struct device *dev = &st.devices[d];
    if (m >= 0) {
        *total = dev->mig[m].total;
        *reserved = 0;
        *used = process_memory(d, m);
    } else {
        *total = dev->total;
        *reserved = dev->reserved;
        *used = dev->used_set ? dev->used : dev->reserved + process_memory(d, -1);
    }
    if (*used > *total) *used = *total;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t handle, nvmlMemory_t *memory) {
    ENTER("nvmlDeviceGetMemoryInfo");
    int d, m;
    DECODE(handle, d, m);
    if (!memory) return leave(NVML_ERROR_INVALID_ARGUMENT);
    u64 total, reserved, used;
    memory_of(d, m, &total, &reserved, &used);
    memory->total = total;
    memory->used = used; /* v1 'used' includes the reserved part, as on drivers >= 510 */
    memory->free = total - used;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t handle, nvmlMemory_v2_t *memory) {
    ENTER("nvmlDeviceGetMemoryInfo_v2");
    int d, m;
    DECODE(handle, d, m);
    if (!memory) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != MEMORY_V2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    u64 total, reserved, used;
    memory_of(d, m, &total, &reserved, &used);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used > reserved ? used - reserved : 0;
    memory->free = total - used;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t handle, nvmlUtilization_t *rates) {
    ENTER("nvmlDeviceGetUtilizationRates");
    int d, m;
    DECODE(handle, d, m);
    if (m >= 0 || st.devices[d].mig_mode == 1) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!rates) return leave(NVML_ERROR_INVALID_ARGUMENT);
    rates->gpu = st.devices[d].util_gpu;
    rates->memory = st.devices[d].util_memory;
    return leave(NVML_SUCCESS);
}

typedef struct {
    unsigned int pid;
    u64 timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    u64 timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

typedef struct {
    unsigned int version, processSamplesCount;
    u64 lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_t;

#define PROCESSES_UTILIZATION_INFO_V1 0x01000018U /* sizeof | 1 << 24 */

struct busy {
    unsigned int pid, sm, mem;
    u64 stamp;
};

static struct busy busy_now[MAX_PROCS];

static u64 now_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (u64)now.tv_sec * 1000000ULL + (u64)now.tv_nsec / 1000ULL;
}

/* The newest tick still in the ring, after last_seen and within the sample's span; 0 if none. */
static u64 newest_tick(const struct sample *s, u64 now, u64 last_seen) {
    u64 period = st.util_period_us;
    u64 newest = now / period * period;
    u64 span = (u64)(st.util_buffer - 1) * period;
    u64 low = newest > span ? newest - span : 0;
    if (s->from > low) low = s->from;
    if (last_seen + 1 > low) low = last_seen + 1;
    u64 high = s->to && s->to < newest ? s->to : newest;
    if (high < low) return 0;
    u64 tick = high / period * period;
    return tick >= low ? tick : 0;
}

/* Drivers before 570.86.15 do not translate utilisation samples into the caller's pid namespace. */
static unsigned int reported_pid(unsigned int pid) {
    int major = 0, minor = 0, patch = 0;
    sscanf(st.driver_version, "%d.%d.%d", &major, &minor, &patch);
    int translated = major > 570 || (major == 570 && (minor > 86 || (minor == 86 && patch >= 15)));
    return translated ? pid : pid + st.host_pid_offset;
}

/* The busy processes of device d newer than last_seen, one each with its newest tick, into busy_now. */
static nvmlReturn_t collect_busy(nvmlDevice_t handle, u64 last_seen, unsigned int *found) {
    int d, m;
    if (!decode(handle, &d, &m)) return NVML_ERROR_INVALID_ARGUMENT;
    if (m >= 0 || st.devices[d].mig_mode == 1) return NVML_ERROR_NOT_SUPPORTED;
    u64 now = now_us();
    unsigned int n = 0;
    for (int i = 0; i < st.sample_count; i++) {
        const struct sample *s = &st.samples[i];
        if (s->device != d || (!s->sm && !s->mem)) continue;
        u64 tick = newest_tick(s, now, last_seen);
        if (!tick) continue;
        unsigned int k = 0;
        while (k < n && busy_now[k].pid != s->pid) k++;
        if (k == n) {
            memset(&busy_now[n++], 0, sizeof busy_now[0]);
            busy_now[k].pid = s->pid;
        }
        struct busy *b = &busy_now[k];
        if (tick > b->stamp) {
            b->stamp = tick;
            b->sm = b->mem = 0;
        }
        if (tick == b->stamp) {
            if (s->sm > b->sm) b->sm = s->sm;
            if (s->mem > b->mem) b->mem = s->mem;
        }
    }
    *found = n;
    return n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* Same size protocol as the process lists: a NULL or short buffer gets the count and
 * INSUFFICIENT_SIZE; nothing newer than last_seen is NOT_FOUND. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t handle, nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count, u64 last_seen) {
    ENTER("nvmlDeviceGetProcessUtilization");
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int n = 0;
    nvmlReturn_t code = collect_busy(handle, last_seen, &n);
    if (code != NVML_SUCCESS) {
        *count = 0;
        return leave(code);
    }
    if (n > *count || !samples) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int k = 0; k < n; k++) {
        memset(&samples[k], 0, sizeof samples[k]);
        samples[k].pid = reported_pid(busy_now[k].pid);
        samples[k].timeStamp = busy_now[k].stamp;
        samples[k].smUtil = busy_now[k].sm;
        samples[k].memUtil = busy_now[k].mem;
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

/* The versioned form of the same query (NVML 12.4+), with the same samples. */
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t handle, nvmlProcessesUtilizationInfo_t *info) {
    ENTER("nvmlDeviceGetProcessesUtilizationInfo");
    if (!info) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != PROCESSES_UTILIZATION_INFO_V1) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned int n = 0;
    nvmlReturn_t code = collect_busy(handle, info->lastSeenTimeStamp, &n);
    if (code != NVML_SUCCESS) {
        info->processSamplesCount = 0;
        return leave(code);
    }
    if (n > info->processSamplesCount || !info->procUtilArray) {
        info->processSamplesCount = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int k = 0; k < n; k++) {
        nvmlProcessUtilizationInfo_v1_t *out = &info->procUtilArray[k];
        memset(out, 0, sizeof *out);
        out->pid = reported_pid(busy_now[k].pid);
        out->timeStamp = busy_now[k].stamp;
        out->smUtil = busy_now[k].sm;
        out->memUtil = busy_now[k].mem;
    }
    info->processSamplesCount = n;
    return leave(NVML_SUCCESS);
}

/* ---- running processes --------------------------------------------------------- */

static int process_matches(const struct proc *p, int d, int m, int graphics) {
    return p->device == d && p->graphics == graphics && (m < 0 || p->mig == m) && process_alive(p);
}

/* Fill the caller's array following NVML's protocol: with too small a buffer (or NULL),
 * report the needed count and INSUFFICIENT_SIZE; with no processes, SUCCESS and 0. */
static nvmlReturn_t list_processes(const char *call, nvmlDevice_t handle, unsigned int *count,
                                   void *out, size_t item_size, int graphics) {
    ENTER(call);
    int d, m;
    DECODE(handle, d, m);
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int needed = 0;
    for (int i = 0; i < st.proc_count; i++) needed += process_matches(&st.procs[i], d, m, graphics);
    if (needed > *count || (needed && !out)) {
        *count = needed;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned int k = 0;
    for (int i = 0; i < st.proc_count; i++) {
        const struct proc *p = &st.procs[i];
        if (!process_matches(p, d, m, graphics)) continue;
        u64 memory = p->memory_known ? p->memory : NOT_AVAILABLE;
        if (item_size == sizeof(nvmlProcessInfo_v1_t)) {
            nvmlProcessInfo_v1_t *info = (nvmlProcessInfo_v1_t *)out + k;
            info->pid = p->pid;
            info->usedGpuMemory = memory;
        } else {
            nvmlProcessInfo_t *info = (nvmlProcessInfo_t *)out + k;
            int in_mig = p->mig >= 0 && st.devices[d].mig_mode == 1;
            info->pid = p->pid;
            info->usedGpuMemory = memory;
            info->gpuInstanceId = in_mig ? st.devices[d].mig[p->mig].gpu_instance_id : NO_INSTANCE;
            info->computeInstanceId = in_mig ? 0 : NO_INSTANCE;
        }
        k++;
    }
    *count = k;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                     nvmlProcessInfo_t *infos) {
    return list_processes("nvmlDeviceGetComputeRunningProcesses_v3", h, n, infos,
                          sizeof *infos, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
                                                     nvmlProcessInfo_t *infos) {
    return list_processes("nvmlDeviceGetComputeRunningProcesses_v2", h, n, infos,
                          sizeof *infos, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n,
                                                  nvmlProcessInfo_v1_t *infos) {
    return list_processes("nvmlDeviceGetComputeRunningProcesses", h, n, infos, sizeof *infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                      nvmlProcessInfo_t *infos) {
    return list_processes("nvmlDeviceGetGraphicsRunningProcesses_v3", h, n, infos,
                          sizeof *infos, 1);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
                                                      nvmlProcessInfo_t *infos) {
    return list_processes("nvmlDeviceGetGraphicsRunningProcesses_v2", h, n, infos,
                          sizeof *infos, 1);
}

/* ---- MIG -------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t handle, unsigned int *current, unsigned int *pending) {
    ENTER("nvmlDeviceGetMigMode");
    int d, m;
    DECODE(handle, d, m);
    if (m >= 0 || !st.devices[d].mig_capable) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!current || !pending) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = (unsigned)st.devices[d].mig_mode;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t handle, unsigned int *count) {
    ENTER("nvmlDeviceGetMaxMigDeviceCount");
    int d, m;
    DECODE(handle, d, m);
    if (m >= 0 || !st.devices[d].mig_capable) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = st.devices[d].mig_mode == 1 ? MAX_MIG : 0;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t handle, unsigned int index,
                                                 nvmlDevice_t *mig) {
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
    int d, m;
    DECODE(handle, d, m);
    if (m >= 0 || !st.devices[d].mig_capable) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!mig || index >= MAX_MIG) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (st.devices[d].mig_mode != 1 || !st.devices[d].mig[index].present)
        return leave(NVML_ERROR_NOT_FOUND);
    *mig = mig_handle(d, (int)index);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t handle, unsigned int *is_mig) {
    ENTER("nvmlDeviceIsMigDeviceHandle");
    int d, m;
    DECODE(handle, d, m);
    if (!is_mig) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *is_mig = m >= 0;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t handle, nvmlDevice_t *parent) {
    ENTER("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    int d, m;
    DECODE(handle, d, m);
    if (m < 0) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!parent) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *parent = device_handle(d);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t handle, unsigned int *id) {
    ENTER("nvmlDeviceGetGpuInstanceId");
    int d, m;
    DECODE(handle, d, m);
    if (m < 0) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!id) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *id = st.devices[d].mig[m].gpu_instance_id;
    return leave(NVML_SUCCESS);
}
