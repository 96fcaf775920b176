/* A simulated NVML (libnvidia-ml.so.1) next to the fake driver: the devices of the simulated
 * machine (FAKECUDA_DEVICES, default 8) with the PCI bus ids and UUID strings the fake driver
 * reports, every process's memory on each device, no NVLink, no fabric. Like the real NVML it
 * indexes every device of the machine, whatever CUDA_VISIBLE_DEVICES says.
 *
 * PyTorch's driver table (c10/cuda/driver_api.cpp) dlopens libnvidia-ml.so.1 and resolves these
 * entry points; its expandable segments ask NVML about the fabric and peers, and a NULL function
 * there is a crash. NCCL (src/misc/nvmlwrap.cc, ncclNvmlEnsureInitialized) resolves the
 * unversioned names and calls nvmlDeviceGetHandleByIndex and nvmlDeviceGetCudaComputeCapability
 * for every device without checking that they exist. Nothing here allocates device memory, so it
 * needs no accounting.
 *
 * Compiled against NVIDIA's nvml.h (scripts/fetch-nvml.sh: target/nvml/include), with the
 * unversioned names declared as the library exports them (NVML_NO_UNVERSIONED_FUNC_DEFS): every
 * signature and structure is NVML's. Handles point into a static table. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEVICES 16
#define MAX_PROCS 256
/* What an nvmlDevice_t points to. */
struct nvmlDevice_st { unsigned index; };
static struct nvmlDevice_st devices[MAX_DEVICES];

/* Initialisations not yet shut down (see nvmlInit_v2). */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_count;
#define initialised (__atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0)

static unsigned device_count(void) {
    const char *v = getenv("FAKECUDA_DEVICES");
    if (!v) return 8;
    char *end;
    long n = strtol(v, &end, 10);
    return (end != v && n >= 0 && n <= MAX_DEVICES) ? (unsigned)n : 8;
}

/* A GPU (not a MIG device). */
static int valid(const struct nvmlDevice_st *d) {
    return d >= devices && d < devices + device_count();
}

/* The machine's MIG devices, as the fake driver has them (shim-tests/fakecuda/src/config.rs,
 * `Mig`): FAKECUDA_MIG "P:N[,P:N...]" splits GPU P into N MIG devices, which take the slots after
 * the GPUs in the order given; a spec the driver refuses gives none. */
static unsigned mig_gpus, mig_gpu[MAX_DEVICES], mig_count[MAX_DEVICES];
static pthread_once_t mig_once = PTHREAD_ONCE_INIT;
static void mig_read(void) {
    const char *v = getenv("FAKECUDA_MIG");
    unsigned n = 0, slots = device_count();
    while (v && *v) {
        while (*v == ' ' || *v == ',') v++;
        if (!*v) break;
        char *end;
        long p = strtol(v, &end, 10);
        if (end == v || *end != ':') { n = 0; break; }
        const char *c = end + 1;
        long k = strtol(c, &end, 10);
        if (end == c || p < 0 || (unsigned long)p >= device_count() || k < 1 || k > 7 || slots + k > MAX_DEVICES) { n = 0; break; }
        for (unsigned i = 0; i < n; i++) if (mig_gpu[i] == (unsigned)p) { n = 0; v = ""; break; }
        if (!*v) break;
        mig_gpu[n] = (unsigned)p;
        mig_count[n++] = (unsigned)k;
        slots += (unsigned)k;
        v = end;
        while (*v == ' ') v++;
        if (*v && *v != ',') { n = 0; break; }
    }
    mig_gpus = n;
}
/* The first slot of GPU `gpu`'s MIG devices and their count (0: not in MIG mode). */
static unsigned mig_slots_of(unsigned gpu, unsigned *first) {
    pthread_once(&mig_once, mig_read);
    unsigned slot = device_count();
    for (unsigned i = 0; i < mig_gpus; i++) {
        if (mig_gpu[i] == gpu) { *first = slot; return mig_count[i]; }
        slot += mig_count[i];
    }
    return 0;
}
/* Whether slot `slot` is a MIG device; then its GPU and its index among the GPU's MIG devices. */
static int mig_of_slot(unsigned slot, unsigned *gpu, unsigned *index) {
    pthread_once(&mig_once, mig_read);
    unsigned first = device_count();
    for (unsigned i = 0; i < mig_gpus; i++) {
        if (slot >= first && slot < first + mig_count[i]) { *gpu = mig_gpu[i]; *index = slot - first; return 1; }
        first += mig_count[i];
    }
    return 0;
}
static int valid_mig(const struct nvmlDevice_st *d) {
    unsigned g, i;
    return d >= devices && d < devices + MAX_DEVICES && mig_of_slot((unsigned)(d - devices), &g, &i);
}
/* A GPU or a MIG device: the handles NVML's memory and process queries take. */
static int valid_any(const struct nvmlDevice_st *d) { return valid(d) || valid_mig(d); }

/* nvml.h: "A reference count of the number of initializations is maintained, and a
 * corresponding call to nvmlShutdown() needs to be issued once usage of the NVML Library is
 * complete. Shutdown will only occur after the reference count reaches zero." Every library of
 * a process shares the one count: SGLang's pynvml peer check (init, queries, shutdown) in the
 * middle of NCCL's session must leave NCCL's handles working. */
nvmlReturn_t nvmlInit_v2(void) {
    pthread_mutex_lock(&init_lock);
    for (unsigned i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    __atomic_add_fetch(&init_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }

/* One initialisation undone; NVML_ERROR_UNINITIALIZED when none is left (nvml.h's return list). */
nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&init_lock);
    if (init_count == 0) r = NVML_ERROR_UNINITIALIZED;
    else __atomic_sub_fetch(&init_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    return r;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count();
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

/* The unversioned name (the library exports both; NCCL resolves this one). */
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* nvml.h: "When used with MIG device handles this API returns indices that can be passed to
 * nvmlDeviceGetMigDeviceHandleByIndex": a MIG device's index among its GPU's. */
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_any(d) || !index) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned gpu, i;
    *index = mig_of_slot(d->index, &gpu, &i) ? i : d->index;
    return NVML_SUCCESS;
}

/* ---- MIG (nvml.h "Multi Instance GPU Management"): one GPU instance and one compute instance per
 * MIG device; GPU instance ids are the MIG device's index + 1, compute instance ids 0. ---- */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned first;
    *current = *pending = mig_slots_of(d->index, &first) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_any(d) || !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = valid_mig(d) ? 1 : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned first;
    *count = mig_slots_of(d->index, &first);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !mig) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned first, n = mig_slots_of(d->index, &first);
    if (!n) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= n) return NVML_ERROR_NOT_FOUND;
    *mig = &devices[first + index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *d) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    unsigned gpu, i;
    if (!valid_mig(mig) || !d || !mig_of_slot(mig->index, &gpu, &i)) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &devices[gpu];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    unsigned gpu, i;
    if (!id || !valid_any(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_of_slot(d->index, &gpu, &i)) return NVML_ERROR_NOT_SUPPORTED;
    *id = i + 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    unsigned gpu, i;
    if (!id || !valid_any(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_of_slot(d->index, &gpu, &i)) return NVML_ERROR_NOT_SUPPORTED;
    *id = 0;
    return NVML_SUCCESS;
}

/* Compute capability 9.0, as the fake driver's device attributes 75/76 say. */
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

/* The fake driver's bus ids: domain 0, bus = ordinal + 1, device 0 (cuDeviceGetPCIBusId).
 * Accepts the driver's form and the short one ("0000:01:00.0"), in any case. */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!pci || !device) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned domain, bus, dev, fn;
    if (sscanf(pci, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return NVML_ERROR_INVALID_ARGUMENT;
    if (domain != 0 || dev != 0 || fn != 0 || bus == 0 || bus > device_count()) return NVML_ERROR_NOT_FOUND;
    *device = &devices[bus - 1];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pci, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pci, device);
}

/* An H200's device and vendor id (the fake driver's attribute GPU_PCI_DEVICE_ID), NVIDIA as the
 * subsystem vendor. NCCL's topology (src/graph/xml.cc, ncclTopoGetXmlFromSys) reads them when
 * the device has no /sys entry, as on the simulated machine. */
#define PCI_DEVICE_ID 0x233510deu
#define PCI_SUBSYSTEM_ID 0x000010deu

/* Both bus id strings in nvml.h's formats (NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, _FMT). */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0, d->index + 1, 0);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, 0, d->index + 1, 0);
    pci->bus = d->index + 1;
    pci->pciDeviceId = PCI_DEVICE_ID;
    pci->pciSubSystemId = PCI_SUBSYSTEM_ID;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t d, nvmlPciInfoExt_t *pci) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !pci) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned version = pci->version;
    memset(pci, 0, sizeof *pci);
    pci->version = version;
    pci->bus = d->index + 1;
    pci->pciDeviceId = PCI_DEVICE_ID;
    pci->pciSubSystemId = PCI_SUBSYSTEM_ID;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller */
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, 0, d->index + 1, 0);
    return NVML_SUCCESS;
}

/* PCIe Gen5 x16. */
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned *gen) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !gen) return NVML_ERROR_INVALID_ARGUMENT;
    *gen = 5;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned *width) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !width) return NVML_ERROR_INVALID_ARGUMENT;
    *width = 16;
    return NVML_SUCCESS;
}
/* In MB/s per lane, as nvml.h's NVML_PCIE_LINK_MAX_SPEED_32000MBPS. */
nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t d, unsigned *speed) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !speed) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = 32000;
    return NVML_SUCCESS;
}

static const char *machine_name(void);

/* "GPU-" and a UUID in the form nvidia-smi prints: the 16 bytes the fake driver's
 * cuDeviceGetUuid_v2 gives the same physical device (config.rs, device_uuid): the FNV-1a hash of
 * the machine's name (big-endian), 0xface, and the device index in 48 bits. NVML indexes every
 * device of the machine, whatever CUDA_VISIBLE_DEVICES says, as the real NVML does. */
static void uuid_of(unsigned i, char *out, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = machine_name(); *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    unsigned gpu, index;
    /* A MIG device: "MIG-" and 0x319c (config.rs, mig_uuid). */
    int mig = mig_of_slot(i, &gpu, &index);
    snprintf(out, len, mig ? "MIG-%08x-%04x-%04x-319c-%012llx" : "GPU-%08x-%04x-%04x-face-%012llx",
             (unsigned)(h >> 32), (unsigned)(h >> 16) & 0xffff, (unsigned)h & 0xffff, (unsigned long long)i);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_any(d) || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[96];
    uuid_of(d->index, buf, sizeof buf);
    if (strlen(buf) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, buf, strlen(buf) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < MAX_DEVICES; i++) {
        unsigned gpu, index;
        if (i >= device_count() && !mig_of_slot(i, &gpu, &index)) continue;
        char buf[96];
        uuid_of(i, buf, sizeof buf);
        if (!strcasecmp(buf, uuid)) { *device = &devices[i]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* No NVLink on the simulated machine. */
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, nvmlIntNvLinkDeviceType_t *type) {
    (void)link; (void)type;
    return initialised ? (valid(d) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT) : NVML_ERROR_UNINITIALIZED;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
    (void)link; (void)pci;
    return initialised ? (valid(d) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT) : NVML_ERROR_UNINITIALIZED;
}
/* No multi-node fabric either. */
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfoV_t *info) {
    (void)info;
    return initialised ? (valid(d) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT) : NVML_ERROR_UNINITIALIZED;
}

struct machine_head;
static const struct machine_head *machine(void);
static unsigned running_processes(unsigned index, unsigned max, unsigned *pids, unsigned long long *used);

/* The processes of the simulated machine holding memory on the device, each with the bytes it
 * holds there (its contexts, modules and allocations: what the driver charged it). nvml.h: a
 * count too small for them is NVML_ERROR_INSUFFICIENT_SIZE with *count set to the number
 * needed; the instance ids are 0xFFFFFFFF but on a MIG device. */
/* A process's GPU and compute instance on a MIG device; 0xFFFFFFFF on a GPU (not MIG). */
static void instance_ids(nvmlDevice_t d, unsigned *gi, unsigned *ci) {
    unsigned gpu, i;
    if (mig_of_slot(d->index, &gpu, &i)) { *gi = i + 1; *ci = 0; }
    else *gi = *ci = 0xFFFFFFFFu;
}

#define RUNNING_PROCESSES(infos_type, fill)                                                       \
    if (!initialised) return NVML_ERROR_UNINITIALIZED;                                            \
    if (!valid_any(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;                              \
    unsigned pids[MAX_PROCS];                                                                     \
    unsigned long long used[MAX_PROCS];                                                           \
    unsigned n = running_processes(d->index, MAX_PROCS, pids, used);                              \
    if (*count < n || (n && !infos)) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }         \
    for (unsigned i = 0; i < n; i++) {                                                            \
        infos_type *p = &infos[i];                                                                \
        memset(p, 0, sizeof *p);                                                                  \
        p->pid = pids[i];                                                                         \
        p->usedGpuMemory = used[i];                                                               \
        fill;                                                                                     \
    }                                                                                             \
    *count = n;                                                                                   \
    return NVML_SUCCESS;

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos) {
    RUNNING_PROCESSES(nvmlProcessInfo_v1_t, (void)0)
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos) {
    RUNNING_PROCESSES(nvmlProcessInfo_v2_t, instance_ids(d, &p->gpuInstanceId, &p->computeInstanceId))
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {
    RUNNING_PROCESSES(nvmlProcessInfo_t, instance_ids(d, &p->gpuInstanceId, &p->computeInstanceId))
}

/* Every pair of distinct devices is peer-capable (as cuDeviceCanAccessPeer says). */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t index,
                                    nvmlGpuP2PStatus_t *status) {
    (void)index;
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(a) || !valid(b) || !status) return NVML_ERROR_INVALID_ARGUMENT;
    *status = a == b ? NVML_P2P_STATUS_NOT_SUPPORTED : NVML_P2P_STATUS_OK;
    return NVML_SUCCESS;
}

/* The version the fake driver reports (FAKECUDA_DRIVER_VERSION, default 12090). */
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = getenv("FAKECUDA_DRIVER_VERSION");
    int n = v ? atoi(v) : 0;
    *version = n >= 2000 ? n : 12090;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { return nvmlSystemGetCudaDriverVersion_v2(version); }

/* ---- The device's name, memory and place in the host ---- */

/* The name the fake driver gives the device (cuDeviceGetName). */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !name) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    int n = snprintf(buf, sizeof buf, "FakeCUDA Simulated GPU %u", d->index);
    if ((unsigned)n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(name, buf, (size_t)n + 1);
    return NVML_SUCCESS;
}

/* The head of the machine file every process of the simulated machine maps
 * (/dev/shm/fakecuda-<FAKECUDA_MACHINE>; shim-tests/fakecuda/src/shm.rs, `Layout`, whose unit
 * test pins these offsets): the device count, each device's total and the bytes all processes
 * hold on it (contexts, modules and the other hidden costs included), as the driver's
 * cuMemGetInfo answers from them. */
#define MACHINE_MAGIC 0x46435544414b0001ull
#define MACHINE_DEVICES 16
/* shm.rs `ProcSlot`: one attached process and the bytes charged to it per device. */
struct proc_slot {
    uint32_t pid, pad;
    uint64_t start;
    uint64_t used[MACHINE_DEVICES];
};
struct machine_head {
    uint64_t magic;
    uint32_t state, devices;
    uint64_t total[MACHINE_DEVICES];
    uint64_t used[MACHINE_DEVICES];
    uint64_t next_ipc_id;
    struct proc_slot procs[MAX_PROCS];
};
_Static_assert(sizeof(struct proc_slot) == 144, "shm.rs ProcSlot: pid, pad, start, used");
_Static_assert(__builtin_offsetof(struct machine_head, procs) == 280, "shm.rs Layout: magic .. used, next_ipc_id, procs");

/* The machine's name as the driver validates it (config.rs, valid_machine_name), else "default". */
static const char *machine_name(void) {
    const char *m = getenv("FAKECUDA_MACHINE");
    size_t n = m ? strlen(m) : 0;
    if (n == 0 || n > 100 || !strcmp(m, ".") || !strcmp(m, "..")) return "default";
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)m[i]) && m[i] != '.' && m[i] != '_' && m[i] != '-') return "default";
    return m;
}

/* The machine file, mapped read-only once it exists (never created here: a machine no driver
 * has attached to holds nothing). */
static const struct machine_head *machine(void) {
    static const struct machine_head *head;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (!head) {
        char path[160];
        snprintf(path, sizeof path, "/dev/shm/fakecuda-%s", machine_name());
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof *head)) {
            close(fd);
            fd = -1;
        }
        if (fd >= 0) {
            void *p = mmap(NULL, sizeof *head, PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (p != MAP_FAILED) head = p;
        }
    }
    pthread_mutex_unlock(&lock);
    return head && __atomic_load_n(&head->magic, __ATOMIC_ACQUIRE) == MACHINE_MAGIC ? head : NULL;
}

/* The live processes holding bytes on device `index` (at most `max`); a slot being claimed or
 * freed (pid 0 or ~0) or of a process that is gone is skipped, as the driver's sweep would. */
static unsigned running_processes(unsigned index, unsigned max, unsigned *pids, unsigned long long *used) {
    const struct machine_head *m = machine();
    unsigned n = 0;
    if (!m || index >= MACHINE_DEVICES) return 0;
    for (unsigned i = 0; i < MAX_PROCS && n < max; i++) {
        uint32_t pid = __atomic_load_n(&m->procs[i].pid, __ATOMIC_ACQUIRE);
        uint64_t u = __atomic_load_n(&m->procs[i].used[index], __ATOMIC_ACQUIRE);
        if (pid == 0 || pid == UINT32_MAX || u == 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue;
        pids[n] = pid;
        used[n] = u;
        n++;
    }
    return n;
}

/* FAKECUDA_TOTAL_MIB as the driver reads it (config.rs: MiB in [2, 2^30], default 98304). */
static uint64_t configured_total(void) {
    const char *v = getenv("FAKECUDA_TOTAL_MIB");
    if (v) {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\n') end++;
        if (end != v && *end == 0 && n >= 2 && n <= (1ull << 30)) return (uint64_t)n << 20;
    }
    return 98304ull << 20;
}

/* Total and used bytes of device `index`: the machine's figures, or the configured total and
 * nothing used before any process attached. */
static void device_memory(unsigned index, uint64_t *total, uint64_t *used) {
    const struct machine_head *m = machine();
    unsigned gpu, i, first, n;
    if (m && index < MACHINE_DEVICES) {
        *total = __atomic_load_n(&m->total[index], __ATOMIC_ACQUIRE);
        *used = __atomic_load_n(&m->used[index], __ATOMIC_ACQUIRE);
        /* A GPU in MIG mode holds what its MIG devices hold. */
        if (index < device_count() && (n = mig_slots_of(index, &first)))
            for (unsigned k = first; k < first + n && k < MACHINE_DEVICES; k++)
                *used += __atomic_load_n(&m->used[k], __ATOMIC_ACQUIRE);
        if (*used > *total) *used = *total;
    } else {
        *total = configured_total();
        /* A MIG device's share (config.rs, Mig::total: rounded down to 2 MiB). */
        if (mig_of_slot(index, &gpu, &i) && (n = mig_slots_of(gpu, &first))) *total = (*total / n) & ~((2ull << 20) - 1);
        *used = 0;
    }
}

/* v1: used is everything allocated on the device by every process; total = free + used. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_any(d) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t total, used;
    device_memory(d->index, &total, &used);
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

/* v2: the caller sets version = nvmlMemory_v2; the simulated device sets nothing aside for the
 * system (its whole total is what cuMemGetInfo offers), so reserved is 0. */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid_any(d) || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t total, used;
    device_memory(d->index, &total, &used);
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

/* The simulated machine is one NUMA node: every device is near node 0 and every online CPU. */
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !node) return NVML_ERROR_INVALID_ARGUMENT;
    *node = 0;
    return NVML_SUCCESS;
}

/* Sets the bits of the online CPUs (/sys/devices/system/cpu/online, a list such as "0-3,6";
 * else the first sysconf(_SC_NPROCESSORS_ONLN)) that fit in `words` words of 64. */
static void online_cpus(unsigned long *set, unsigned words) {
    memset(set, 0, words * sizeof *set);
    const unsigned bits = 8 * sizeof *set;
    char list[4096] = "";
    FILE *f = fopen("/sys/devices/system/cpu/online", "re");
    if (f) {
        if (!fgets(list, sizeof list, f)) list[0] = 0;
        fclose(f);
    }
    if (!list[0] || list[0] == '\n') {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(list, sizeof list, "0-%ld", (n > 0 ? n : 1) - 1);
    }
    for (char *p = list; *p && *p != '\n';) {
        char *end;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        if (end == p) break;
        if (*end == '-') {
            p = end + 1;
            hi = strtoul(p, &end, 10);
            if (end == p) break;
        }
        for (unsigned long c = lo; c <= hi && c < (unsigned long)words * bits; c++) set[c / bits] |= 1ul << (c % bits);
        p = *end == ',' ? end + 1 : end;
    }
}

nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t d, unsigned int cpuSetSize, unsigned long *cpuSet,
                                                 nvmlAffinityScope_t scope) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || cpuSetSize == 0 || !cpuSet) return NVML_ERROR_INVALID_ARGUMENT;
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
    online_cpus(cpuSet, cpuSetSize);
    return NVML_SUCCESS;
}

/* nvml.h: the same as WithinScope at NVML_AFFINITY_SCOPE_NODE. */
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int cpuSetSize, unsigned long *cpuSet) {
    return nvmlDeviceGetCpuAffinityWithinScope(d, cpuSetSize, cpuSet, NVML_AFFINITY_SCOPE_NODE);
}
