/* A stand-in for libnvidia-ml.so.1, for tests/test_nvml.py on a machine without a driver: the functions
 * lab/nvml.py calls, with nvml.h's C signatures, return codes, enum values and buffer contracts, over two
 * made-up GPUs. It checks how lab.nvml passes arguments through ctypes (an opaque 64-bit handle, out
 * pointers, string buffers and their lengths), not what a GPU reads: that is tests/test_nvml.py's GPU
 * test, against nvidia-smi. The test sets the knobs (standin_*) through ctypes.
 *
 * Built by the test: cc -shared -fPIC -o libnvml-standin.so nvml_standin.c [-DSTANDIN_NO_MAX_CLOCK] [-DSTANDIN_NO_LOAD] */

#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;                       /* an enum in nvml.h */
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_UNINITIALIZED = 1 };
typedef enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 } nvmlClockType_t;

struct nvmlDevice_st {
    const char *uuid, *name;
    unsigned int index, sm_mhz, mem_mhz, max_sm_mhz, power_mw, draw_mw, temperature_c;
    unsigned long long energy_mj, reasons;
    int power_supported, max_clock_supported;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

/* host order: index 0 and 1; the second supports neither a power limit nor a max clock query */
static struct nvmlDevice_st devices[] = {
    {"GPU-5tand1n0-0000-0000-0000-000000000000", "Stand-in GPU (tests)", 0, 1755, 2619, 1980, 699999, 512345, 61,
     12345678901ULL, 0x4 | 0x200ULL | (1ULL << 40), 1, 1},
    {"GPU-5tand1n1-1111-1111-1111-111111111111", "Stand-in GPU (tests)", 1, 1410, 2619, 1980, 0, 0, 30,
     0, 0x1, 0, 0},
};

int standin_init_result = NVML_SUCCESS;   /* what nvmlInit_v2 returns */
int standin_device_result = NVML_SUCCESS; /* returned by every device query where set (a GPU fallen off the bus: 15) */
int standin_inits = 0;                    /* how often nvmlInit_v2 was called */
static int initialised = 0;

nvmlReturn_t nvmlInit_v2(void) {
    standin_inits++;
    if (standin_init_result == NVML_SUCCESS) initialised = 1;
    return standin_init_result;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case 9: return "Driver Not Loaded";
        case 15: return "GPU is lost";
        default: return "Unknown Error";
    }
}

static nvmlReturn_t text(const char *value, char *buf, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (buf == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(buf, length, "%s", value);
    return NVML_SUCCESS;
}

/* every device query: the handle must be one this library gave (a handle cut to 32 bits is not) */
static nvmlReturn_t check(nvmlDevice_t device, const void *out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (device != &devices[0] && device != &devices[1]) return NVML_ERROR_INVALID_ARGUMENT;
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return standin_device_result;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return text("999.12.34", version, length);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < 2; i++)
        if (strcmp(uuid, devices[i].uuid) == 0) { *device = &devices[i]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    nvmlReturn_t r = check(device, index);
    if (r == NVML_SUCCESS) *index = device->index;
    return r;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t r = check(device, name);
    return r == NVML_SUCCESS ? text(device->name, name, length) : r;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t r = check(device, uuid);
    return r == NVML_SUCCESS ? text(device->uuid, uuid, length) : r;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    nvmlReturn_t r = check(device, clock);
    if (r != NVML_SUCCESS) return r;
    if (type == NVML_CLOCK_SM) *clock = device->sm_mhz;
    else if (type == NVML_CLOCK_MEM) *clock = device->mem_mhz;
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

#ifndef STANDIN_NO_MAX_CLOCK   /* a library without this function: lab.nvml must call it unavailable */
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    nvmlReturn_t r = check(device, clock);
    if (r != NVML_SUCCESS) return r;
    if (!device->max_clock_supported) return NVML_ERROR_NOT_SUPPORTED;
    if (type != NVML_CLOCK_SM) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = device->max_sm_mhz;
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    nvmlReturn_t r = check(device, limit);
    if (r != NVML_SUCCESS) return r;
    if (!device->power_supported) return NVML_ERROR_NOT_SUPPORTED;
    *limit = device->power_mw;
    return NVML_SUCCESS;
}

#ifndef STANDIN_NO_LOAD   /* a library without load()'s functions: read() must still work, load() give None */
/* the draw is as unsupported as the limit on the second GPU; energy is 64-bit (mJ since the driver loaded) */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    nvmlReturn_t r = check(device, power);
    if (r != NVML_SUCCESS) return r;
    if (!device->power_supported) return NVML_ERROR_NOT_SUPPORTED;
    *power = device->draw_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    nvmlReturn_t r = check(device, temp);
    if (r != NVML_SUCCESS) return r;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;   /* NVML_TEMPERATURE_GPU */
    *temp = device->temperature_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    nvmlReturn_t r = check(device, energy);
    if (r != NVML_SUCCESS) return r;
    if (!device->power_supported) return NVML_ERROR_NOT_SUPPORTED;
    *energy = device->energy_mj;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    nvmlReturn_t r = check(device, reasons);
    if (r == NVML_SUCCESS) *reasons = device->reasons;
    return r;
}
#endif
