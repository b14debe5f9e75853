/* CRC32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's crc32 instruction): the
 * checksum TUTTI_CHECKSUM=1 puts on every piece a net transport sends. */
#ifndef TUTTI_CRC32C_H_
#define TUTTI_CRC32C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CRC32C of buf[0..len) continued from crc (0 to start): crc32c(crc32c(0, a), b) is the
 * CRC of a followed by b. crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* The same with the table only (what a CPU without SSE 4.2 runs; the tests compare the two). */
uint32_t crc32c_portable(uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
