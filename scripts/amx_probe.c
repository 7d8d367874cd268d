/* Exits 0 when this process may run AMX tile instructions: the kernel grants the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM) and a tile configures and zeroes without SIGILL. Some VMs report AMX in
 * /proc/cpuinfo and still fault; scripts/setup_bench_peers.sh builds llama.cpp with AMX only where this passes. */
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */)) return 1;
    static volatile unsigned char config[64]; /* volatile: the compiler cannot see ldtilecfg read it */
    config[0] = 1;   /* palette 1 */
    config[16] = 64; /* tile 0: 64 bytes a row */
    config[48] = 16; /* tile 0: 16 rows */
    _tile_loadconfig((const void *)config);
    _tile_zero(0);
    _tile_release();
    return 0;
}
