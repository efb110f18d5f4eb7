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

#include "accel.h"

static uint8_t out_area[IMAGE_OUT_BYTES] __attribute__((aligned(IMAGE_ALIGN)));

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
	status = wait_done(IRQ_TIMEOUT);
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
	report_area(out_area, sizeof out_area);
	put_str("end ok\n");
	finish();
	return 0;
}
