/* A Modbus RTU server on a serial line, built on libmodbus (not on pymodbus, which the agent
 * uses): the independent peer of the agent's Modbus RTU tests. Compiled by the test fixture:
 *
 *     cc -O1 -o rtu_server peers/libmodbus/rtu_server.c $(pkg-config --cflags --libs libmodbus)
 *     ./rtu_server DEVICE BAUD PARITY(N|E|O) STOPBITS UNIT
 *
 * It serves 4,096 holding registers (input registers read the same memory) for one unit id and
 * prints "READY" once the line is open. Commands, one per stdin line, each answered "OK":
 *   regs START V1 V2 ...        set holding registers from START
 *   exception START COUNT CODE  reads overlapping [START, START+COUNT) answer exception CODE
 *   clear                       no exceptions, no faults
 *   garble N                    the next N answers go out with a wrong CRC (a noisy line)
 *   drop N                      the next N answers lose their last bytes (a line dropping bytes)
 * Served requests are counted; "count" answers "COUNT served garbled dropped".
 */
#include <errno.h>
#include <modbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#define NREGS 4096

static modbus_mapping_t *map;
static int exc_start = -1, exc_count = 0, exc_code = 0;
static int garble = 0, drop = 0, served = 0, garbled = 0, dropped = 0;

static void command(char *line) {
    char *cmd = strtok(line, " \t\r\n");
    if (cmd == NULL) return;
    if (strcmp(cmd, "regs") == 0) {
        int at = atoi(strtok(NULL, " \t\r\n"));
        for (char *v; (v = strtok(NULL, " \t\r\n")) != NULL && at < NREGS; at++) {
            map->tab_registers[at] = map->tab_input_registers[at] = (uint16_t)atoi(v);
        }
    } else if (strcmp(cmd, "exception") == 0) {
        exc_start = atoi(strtok(NULL, " \t\r\n"));
        exc_count = atoi(strtok(NULL, " \t\r\n"));
        exc_code = atoi(strtok(NULL, " \t\r\n"));
    } else if (strcmp(cmd, "clear") == 0) {
        exc_start = -1, garble = 0, drop = 0;
    } else if (strcmp(cmd, "garble") == 0) {
        garble = atoi(strtok(NULL, " \t\r\n"));
    } else if (strcmp(cmd, "drop") == 0) {
        drop = atoi(strtok(NULL, " \t\r\n"));
    } else if (strcmp(cmd, "count") == 0) {
        printf("COUNT %d %d %d\n", served, garbled, dropped);
        fflush(stdout);
        return;
    } else {
        printf("ERROR unknown command %s\n", cmd);
        fflush(stdout);
        return;
    }
    printf("OK\n");
    fflush(stdout);
}

/* A well-formed answer to a read of holding/input registers, written by hand so that its CRC or
 * its length can be spoiled; libmodbus computes the CRC the same way (polynomial 0xA001). */
static void spoiled_answer(int fd, const uint8_t *req, int unit, int cut) {
    int addr = (req[2] << 8) | req[3], count = (req[4] << 8) | req[5];
    uint8_t out[260];
    int n = 0;
    if (count > 125) count = 125;
    out[n++] = (uint8_t)unit;
    out[n++] = req[1];
    out[n++] = (uint8_t)(count * 2);
    for (int i = 0; i < count; i++) {
        /* every register one higher than served: a spoiled answer that were decoded would show */
        uint16_t v = (uint16_t)((addr + i < NREGS) ? map->tab_registers[addr + i] + 1 : 1);
        out[n++] = v >> 8;
        out[n++] = v & 0xFF;
    }
    uint16_t crc = 0xFFFF;
    for (int i = 0; i < n; i++) {
        crc ^= out[i];
        for (int b = 0; b < 8; b++) crc = (crc & 1) ? (crc >> 1) ^ 0xA001 : crc >> 1;
    }
    crc ^= cut ? 0 : 0x5A5A; /* garbled: a CRC that does not match */
    out[n++] = crc & 0xFF;
    out[n++] = crc >> 8;
    if (cut) n = n > 4 ? n - 3 : 1; /* dropped: the tail never arrives */
    if (write(fd, out, (size_t)n) < 0) perror("write");
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s DEVICE BAUD PARITY STOPBITS UNIT\n", argv[0]);
        return 2;
    }
    int unit = atoi(argv[5]);
    modbus_t *ctx = modbus_new_rtu(argv[1], atoi(argv[2]), argv[3][0], 8, atoi(argv[4]));
    if (ctx == NULL || modbus_set_slave(ctx, unit) == -1 || modbus_connect(ctx) == -1) {
        printf("FAILED %s\n", modbus_strerror(errno));
        return 1;
    }
    map = modbus_mapping_new(0, 0, NREGS, NREGS);
    printf("READY\n");
    fflush(stdout);
    int fd = modbus_get_socket(ctx);
    uint8_t req[MODBUS_RTU_MAX_ADU_LENGTH];
    char line[65536];
    for (;;) {
        fd_set in;
        FD_ZERO(&in);
        FD_SET(0, &in);
        FD_SET(fd, &in);
        if (select(fd + 1, &in, NULL, NULL, NULL) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (FD_ISSET(0, &in)) {
            if (fgets(line, sizeof line, stdin) == NULL) break;
            command(line);
        }
        if (!FD_ISSET(fd, &in)) continue;
        int rc = modbus_receive(ctx, req);
        if (rc <= 0) continue; /* a bad frame from the master, or one for another unit */
        served++;
        int fn = req[1], addr = (req[2] << 8) | req[3], count = (req[4] << 8) | req[5];
        int reads = (fn == 3 || fn == 4);
        if (reads && exc_start >= 0 && addr < exc_start + exc_count && exc_start < addr + count) {
            modbus_reply_exception(ctx, req, exc_code);
        } else if (reads && garble > 0) {
            garble--, garbled++;
            spoiled_answer(fd, req, unit, 0);
        } else if (reads && drop > 0) {
            drop--, dropped++;
            spoiled_answer(fd, req, unit, 1);
        } else {
            modbus_reply(ctx, req, rc, map);
        }
    }
    modbus_mapping_free(map);
    modbus_close(ctx);
    modbus_free(ctx);
    return 0;
}
