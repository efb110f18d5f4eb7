/* What both firmwares of the bertaccel SoC share (main.c, layer.c): UART output, the end of
 * the simulation, the interrupt handler, and the shell's identity check, wait and fault report
 * (docs/axi.md, "Running a program"). Included once by each firmware, after the register map
 * (BERTACCEL_CSR_H) and LiteX's generated headers. */

#ifndef ACCEL_H
#define ACCEL_H

#define REG(name) (*(volatile uint32_t *)(ACCEL_BASE + BERTACCEL_##name##_OFFSET))
#define FIELD(reg, field, value) BERTACCEL_GET(reg##_##field, value)

/* Timer ticks (clock cycles) to wait for the interrupt before polling STATUS. */
#define IRQ_TIMEOUT 2000000u
/* STATUS reads before giving up, after the time-out. */
#define MAX_POLLS 100000u

/* Written by the interrupt handler. */
static volatile uint32_t irq_count;
static volatile uint32_t irq_cause;

static inline void put_char(char c)
{
	while (uart_txfull_read())
		;
	uart_rxtx_write(c);
}

static inline void put_str(const char *s)
{
	while (*s)
		put_char(*s++);
}

static inline void put_hex(uint32_t value, int digits)
{
	for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4)
		put_char("0123456789abcdef"[(value >> shift) & 0xf]);
}

static inline void put_dec(uint32_t value)
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
static inline void put_fact(const char *name, uint32_t value)
{
	put_str(name);
	put_str(" 0x");
	put_hex(value, 8);
	put_str("\n");
}

static inline void finish(void)
{
	/* Ends the simulation (litex.build.sim SimFinish); on a board the CPU waits here. */
#ifdef CSR_SIM_FINISH_BASE
	sim_finish_finish_write(1);
#endif
	for (;;)
		;
}

static inline void fail(const char *why)
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

static inline void check_identity(void)
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

/* Wait for the end of the run: the interrupt, or after `ticks` cycles, STATUS.DONE. */
static inline uint32_t wait_done(uint32_t ticks)
{
	timer0_en_write(0);
	timer0_reload_write(0);
	timer0_load_write(ticks);
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

static inline void report_fault(uint32_t status)
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

/* `n` bytes of `area` as hexadecimal bytes, 32 a line after their offset (4 hexadecimal
 * digits, 8 past 64 KiB), and their FNV-1a checksum. */
static inline void report_area(const volatile uint8_t *area, uint32_t n)
{
	uint32_t hash = 2166136261u;
	int digits = n > 0x10000u ? 8 : 4;
	for (uint32_t i = 0; i < n; i++) {
		if (i % 32 == 0) {
			put_str("out ");
			put_hex(i, digits);
		}
		put_char(' ');
		put_hex(area[i], 2);
		if (i % 32 == 31 || i + 1 == n)
			put_str("\n");
		hash = (hash ^ area[i]) * 16777619u;
	}
	put_fact("checksum", hash);
}

#endif /* ACCEL_H */
