/* A simulated NVML (libnvidia-ml.so.1) next to the fake driver: the devices of the simulated
 * machine (FAKECUDA_DEVICES, default 8) with the PCI bus ids and UUID strings the fake driver
 * reports, no NVLink, no fabric, no running processes.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_DEVICES 16
/* What an nvmlDevice_t points to. */
struct nvmlDevice_st { unsigned index; };
static struct nvmlDevice_st devices[MAX_DEVICES];
static int initialised;

static unsigned device_count(void) {
    const char *v = getenv("FAKECUDA_DEVICES");
    if (!v) return 8;
    char *end;
    long n = strtol(v, &end, 10);
    return (end != v && n >= 0 && n <= MAX_DEVICES) ? (unsigned)n : 8;
}

static int valid(const struct nvmlDevice_st *d) {
    return d >= devices && d < devices + device_count();
}

nvmlReturn_t nvmlInit_v2(void) {
    for (unsigned i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    initialised = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
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

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = d->index;
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

/* "GPU-" and a UUID in the form nvidia-smi prints; stable per ordinal. */
static void uuid_of(unsigned i, char *out, size_t len) {
    snprintf(out, len, "GPU-fa4ec0da-0000-4000-8000-%012x", i);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[96];
    uuid_of(d->index, buf, sizeof buf);
    if (strlen(buf) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, buf, strlen(buf) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < device_count(); i++) {
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

/* NVML does not see the simulated processes: none are listed. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos) {
    (void)infos;
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!valid(d) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
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
