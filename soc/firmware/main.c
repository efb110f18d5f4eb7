/* Firmware of the bertaccel SoC (soc/build.py): one program run on the accelerator.
 *
 * The register map is the build's generated header (BERTACCEL_CSR_H, written by
 * bertaccel.fpga.ip.csr_header); the program, its input data and the sizes are image.h,
 * written by the host (bertaccel.soc.firmware) from a DramImage; where the shell's registers,
 * the UART and the timer sit comes from LiteX's generated headers. The run follows
 * docs/axi.md, "Running a program": check the identity registers, program the regions and the
 * DMA window, start, wait for the interrupt (with the timer as a time-out, then polling STATUS
 * as the fallback), check the error and fault bits, read the counters and the output area.
 * Everything is reported over the UART, one fact a line, for the host to parse
 * (bertaccel.soc.firmware.parse_report); the last line is "end ok" or "end error ...". */

#include <stdint.h>

#include <generated/csr.h>
#include <generated/mem.h>
#include <generated/soc.h>
#include <irq.h>

#include BERTACCEL_CSR_H
#include "image.h"

#define REG(name) (*(volatile uint32_t *)(ACCEL_BASE + BERTACCEL_##name##_OFFSET))
#define FIELD(reg, field, value) BERTACCEL_GET(reg##_##field, value)

/* Timer ticks (clock cycles) to wait for the interrupt before polling STATUS. */
#define IRQ_TIMEOUT 2000000u
/* STATUS reads before giving up, after the time-out. */
#define MAX_POLLS 100000u

/* Written by the interrupt handler. */
static volatile uint32_t irq_count;
static volatile uint32_t irq_cause;

static uint8_t out_area[IMAGE_OUT_BYTES] __attribute__((aligned(IMAGE_ALIGN)));

static void put_char(char c)
{
	while (uart_txfull_read())
		;
	uart_rxtx_write(c);
}

static void put_str(const char *s)
{
	while (*s)
		put_char(*s++);
}

static void put_hex(uint32_t value, int digits)
{
	for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4)
		put_char("0123456789abcdef"[(value >> shift) & 0xf]);
}

static void put_dec(uint32_t value)
{
	char text[11];
	int n = 0;
	do {
		text[n++] = '0' + value % 10;
		value /= 10;
	} while (value);
	while (n)
		put_char(text[--n]);
}

/* "name value", value in hexadecimal, and a new line. */
static void put_fact(const char *name, uint32_t value)
{
	put_str(name);
	put_str(" 0x");
	put_hex(value, 8);
	put_str("\n");
}

static void finish(void)
{
	/* Ends the simulation (litex.build.sim SimFinish); on a board the CPU waits here. */
	sim_finish_finish_write(1);
	for (;;)
		;
}

static void fail(const char *why)
{
	put_str("end error ");
	put_str(why);
	put_str("\n");
	finish();
}

/* Called by LiteX's crt0 trap entry for every interrupt. The shell's irq is a level that
 * stays high until the next CTRL.START: record why the run ended, then disable its causes
 * so that the line falls. */
void isr(void)
{
	uint32_t pending = irq_pending() & irq_getmask();
	if (pending & (1u << ACCEL_INTERRUPT)) {
		irq_cause = REG(IRQ_STATUS);
		REG(IRQ_ENABLE) = 0;
		irq_count++;
	}
}

static void check_identity(void)
{
	static const struct { const char *name; uint32_t offset, want; } ids[] = {
		{"ID", BERTACCEL_ID_OFFSET, BERTACCEL_ID_VALUE},
		{"CONFIG0", BERTACCEL_CONFIG0_OFFSET, BERTACCEL_CONFIG0_VALUE},
		{"CONFIG1", BERTACCEL_CONFIG1_OFFSET, BERTACCEL_CONFIG1_VALUE},
		{"CONFIG2", BERTACCEL_CONFIG2_OFFSET, BERTACCEL_CONFIG2_VALUE},
	};
	for (unsigned i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		uint32_t got = *(volatile uint32_t *)(ACCEL_BASE + ids[i].offset);
		if (got != ids[i].want) {
			put_fact(ids[i].name, got);
			fail("identity: the shell is not the build of the header");
		}
	}
	put_str("identity ok\n");
}

static void program_run(void)
{
	uintptr_t prog = (uintptr_t)image_prog, data = (uintptr_t)image_data;
	uintptr_t out = (uintptr_t)out_area;
	uintptr_t first = prog, last = out + sizeof out_area;
	if (data < first)
		first = data;
	if (out < first)
		first = out;
	if (prog + sizeof image_prog > last)
		last = prog + sizeof image_prog;
	if (data + sizeof image_data > last)
		last = data + sizeof image_data;
	REG(PROG_ADDR_LO) = prog;
	REG(PROG_ADDR_HI) = 0;
	REG(PROG_LEN) = IMAGE_PROG_LEN;
	REG(DATA_ADDR_LO) = data;
	REG(DATA_ADDR_HI) = 0;
	REG(DATA_LEN) = IMAGE_DATA_LEN;
	REG(OUT_ADDR_LO) = out;
	REG(OUT_ADDR_HI) = 0;
	REG(OUT_LEN) = IMAGE_OUT_LEN;
	/* The window: whole bus words from the lowest region to the end of the highest. */
	REG(WIN_BASE_LO) = first & ~(uintptr_t)(IMAGE_BUS_BYTES - 1);
	REG(WIN_BASE_HI) = 0;
	REG(WIN_LIMIT_LO) = ((last + IMAGE_BUS_BYTES - 1) & ~(uintptr_t)(IMAGE_BUS_BYTES - 1)) - 1;
	REG(WIN_LIMIT_HI) = 0;
	REG(IRQ_ENABLE) = BERTACCEL_IRQ_ENABLE_DONE_MASK | BERTACCEL_IRQ_ENABLE_FAULT_MASK;
}

/* Wait for the end of the run: the interrupt, or after IRQ_TIMEOUT cycles, STATUS.DONE. */
static uint32_t wait_done(void)
{
	timer0_en_write(0);
	timer0_reload_write(0);
	timer0_load_write(IRQ_TIMEOUT);
	timer0_en_write(1);
	timer0_update_value_write(1);
	while (!irq_count && timer0_value_read()) {
		timer0_update_value_write(1);
	}
	timer0_en_write(0);
	uint32_t status = REG(STATUS);
	if (irq_count) {
		put_str("wake irq\n");
		put_fact("irq_status", irq_cause);
		return status;
	}
	for (uint32_t polls = 0; !FIELD(STATUS, DONE, status); polls++) {
		if (polls == MAX_POLLS) {
			put_fact("status", status);
			REG(CTRL) = BERTACCEL_CTRL_SOFT_RESET_MASK;
			fail("timeout: the run did not finish; the shell was soft-reset");
		}
		status = REG(STATUS);
	}
	put_str("wake poll\n");
	return status;
}

static void report_fault(uint32_t status)
{
	uint32_t fault = REG(FAULT);
	put_fact("status", status);
	put_fact("fault", fault);
	put_fact("fault_pc", REG(FAULT_PC));
	put_fact("fault_addr", REG(FAULT_ADDR_LO));
	put_fact("stall", REG(STALL));
	REG(CTRL) = BERTACCEL_CTRL_SOFT_RESET_MASK;
	fail("fault: the run stopped with STATUS.ERROR, BUS_ERROR or FAULT");
}

/* The output area as hexadecimal bytes, 32 a line, and its FNV-1a checksum. */
static void report_outputs(void)
{
	uint32_t hash = 2166136261u;
	for (uint32_t i = 0; i < sizeof out_area; i++) {
		if (i % 32 == 0) {
			put_str("out ");
			put_hex(i, 4);
		}
		put_char(' ');
		put_hex(out_area[i], 2);
		if (i % 32 == 31 || i + 1 == sizeof out_area)
			put_str("\n");
		hash = (hash ^ out_area[i]) * 16777619u;
	}
	put_fact("checksum", hash);
}

int main(void)
{
	put_str("bertaccel soc " IMAGE_TAG "\n");
	check_identity();
	uint32_t status = REG(STATUS);
	if (FIELD(STATUS, BUSY, status))
		fail("busy: a run or a soft reset is in progress");
	/* Bytes the shell does not write keep this, so a missing result shows. */
	for (uint32_t i = 0; i < sizeof out_area; i++)
		out_area[i] = 0xa5;
	program_run();
	irq_setmask(irq_getmask() | (1u << ACCEL_INTERRUPT));
	irq_setie(1);
	REG(CTRL) = BERTACCEL_CTRL_START_MASK;
	status = wait_done();
	irq_setie(0);
	if (FIELD(STATUS, ERROR, status) || FIELD(STATUS, BUS_ERROR, status)
	    || FIELD(STATUS, FAULT, status))
		report_fault(status);
	put_fact("status", status);
	put_str("out_count ");
	put_dec(REG(OUT_COUNT));
	put_str("\nprog_count ");
	put_dec(REG(PROG_COUNT));
	put_str("\ndata_count ");
	put_dec(REG(DATA_COUNT));
	put_str("\n");
	uint32_t low = REG(CYCLES_LO); /* latches CYCLES_HI */
	uint32_t high = REG(CYCLES_HI);
	put_str("cycles 0x");
	put_hex(high, 8);
	put_hex(low, 8);
	put_str("\n");
	report_outputs();
	put_str("end ok\n");
	finish();
	return 0;
}
