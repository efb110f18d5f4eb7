/* Second firmware of the bertaccel SoC: one BERT encoder layer, six programs back to back.
 *
 * The host (bertaccel.soc.layer) lays the layer out in main RAM, which the model loads at
 * start: the layer's int8 input, and for each stage (qkv, qk, pv, wo, w1, w2) its program, its
 * input stream with only the constants in it (weights, biases, padding), its output area, and
 * a table of moves. layer.h (bertaccel.soc.firmware.layer_header) says where each lies. For
 * each stage the firmware follows the table, moving bytes of the layer's input and words of
 * the earlier stages' output areas into the stage's input stream (the host's column picks,
 * head splits and probability digit planes, as runs of bytes), then runs the program as
 * main.c runs its one, and prints the stage's CYCLES and counters. At the end it prints the
 * last stage's output area (the layer's output) and its checksum, and "end ok". */

#include <stdint.h>

#include <generated/csr.h>
#include <generated/mem.h>
#include <generated/soc.h>
#include <irq.h>

#include BERTACCEL_CSR_H

#include "accel.h"

/* How a move takes its source element (bertaccel.soc.layer.MOVE_*). */
#define MOVE_COPY 0u
#define MOVE_HIGH 1u
#define MOVE_LOW 2u
/* The bits of one digit plane of a probability (bertaccel.golden.intops.PROB_DIGIT_BITS). */
#define DIGIT_BITS 6u

struct layer_stage {
	const char *name;
	uintptr_t prog, data, out, moves;
	uint32_t prog_len, data_len, out_len, n_moves;
	uintptr_t win_base, win_limit;
	uint32_t ticks; /* timer ticks to wait for the interrupt */
};

#include "layer.h"

extern char _ebss[];

/* Move the bytes of stage `s`'s input stream that come from the layer's input or from an
 * earlier stage's output area. A table row is three words: the byte offset in the stream,
 * the first source element, and count | how << 24 | source << 28 (source 0: the layer's
 * input, bytes; source 1 + i: stage i's output area, 32-bit words). */
static void follow_moves(unsigned s)
{
	const struct layer_stage *stage = &layer_stages[s];
	volatile uint8_t *stream = (volatile uint8_t *)stage->data;
	const volatile uint32_t *row = (const volatile uint32_t *)stage->moves;
	for (uint32_t r = 0; r < stage->n_moves; r++, row += 3) {
		uint32_t dst = row[0], element = row[1], word = row[2];
		uint32_t count = word & 0xffffffu, how = (word >> 24) & 0xfu, source = word >> 28;
		if (source == 0) {
			const volatile uint8_t *x = (const volatile uint8_t *)LAYER_X_ADDR + element;
			for (uint32_t i = 0; i < count; i++)
				stream[dst + i] = x[i];
			continue;
		}
		if (source > s)
			fail("moves: a stage reads the output of a stage not yet run");
		const volatile uint32_t *out =
			(const volatile uint32_t *)layer_stages[source - 1].out + element;
		for (uint32_t i = 0; i < count; i++) {
			uint32_t value = out[i];
			if (how == MOVE_HIGH)
				value >>= DIGIT_BITS;
			else if (how == MOVE_LOW)
				value &= (1u << DIGIT_BITS) - 1;
			stream[dst + i] = (uint8_t)value;
		}
	}
}

static void program_stage(const struct layer_stage *stage)
{
	REG(PROG_ADDR_LO) = stage->prog;
	REG(PROG_ADDR_HI) = 0;
	REG(PROG_LEN) = stage->prog_len;
	REG(DATA_ADDR_LO) = stage->data;
	REG(DATA_ADDR_HI) = 0;
	REG(DATA_LEN) = stage->data_len;
	REG(OUT_ADDR_LO) = stage->out;
	REG(OUT_ADDR_HI) = 0;
	REG(OUT_LEN) = stage->out_len;
	REG(WIN_BASE_LO) = stage->win_base;
	REG(WIN_BASE_HI) = 0;
	REG(WIN_LIMIT_LO) = stage->win_limit;
	REG(WIN_LIMIT_HI) = 0;
}

/* "name_<stage> value" in decimal. */
static void put_count(const char *name, const char *stage, uint32_t value)
{
	put_str(name);
	put_char('_');
	put_str(stage);
	put_char(' ');
	put_dec(value);
	put_str("\n");
}

static void run_stage(unsigned s)
{
	const struct layer_stage *stage = &layer_stages[s];
	follow_moves(s);
	program_stage(stage);
	/* The previous run's DONE holds until CTRL.START, and the handler cleared IRQ_ENABLE:
	 * enable the interrupt only once this run has started. */
	REG(CTRL) = BERTACCEL_CTRL_START_MASK;
	irq_count = 0;
	REG(IRQ_ENABLE) = BERTACCEL_IRQ_ENABLE_DONE_MASK | BERTACCEL_IRQ_ENABLE_FAULT_MASK;
	uint32_t status = wait_done(stage->ticks);
	if (FIELD(STATUS, ERROR, status) || FIELD(STATUS, BUS_ERROR, status)
	    || FIELD(STATUS, FAULT, status)) {
		put_str("stage ");
		put_str(stage->name);
		put_str("\n");
		report_fault(status);
	}
	put_count("out_count", stage->name, REG(OUT_COUNT));
	put_count("prog_count", stage->name, REG(PROG_COUNT));
	put_count("data_count", stage->name, REG(DATA_COUNT));
	uint32_t low = REG(CYCLES_LO); /* latches CYCLES_HI */
	uint32_t high = REG(CYCLES_HI);
	put_str("cycles_");
	put_str(stage->name);
	put_str(" 0x");
	put_hex(high, 8);
	put_hex(low, 8);
	put_str("\n");
}

int main(void)
{
	put_str("bertaccel soc layer " LAYER_TAG "\n");
	if ((uintptr_t)_ebss > LAYER_IMAGE_BASE)
		fail("memory: the firmware's data runs into the layer's image");
	check_identity();
	if (FIELD(STATUS, BUSY, REG(STATUS)))
		fail("busy: a run or a soft reset is in progress");
	irq_setmask(irq_getmask() | (1u << ACCEL_INTERRUPT));
	irq_setie(1);
	for (unsigned s = 0; s < LAYER_STAGES; s++)
		run_stage(s);
	irq_setie(0);
	const struct layer_stage *last = &layer_stages[LAYER_STAGES - 1];
	report_area((const volatile uint8_t *)last->out, LAYER_OUT_BYTES);
	put_str("end ok\n");
	finish();
	return 0;
}
