/* LiteX's simulation glue (litex/build/sim/core/veril.cpp) without waveform tracing: the
 * SoC's model is built without Verilator's --trace (soc/build.py), which halves the C++ to
 * compile. The same entry points, the tracer's as no-ops. */

#include <stdint.h>
#include "Vsim.h"
#include "verilated.h"

static uint64_t main_time = 0;

extern "C" void litex_sim_eval(void *vsim, uint64_t time_ps)
{
	((Vsim *)vsim)->eval();
	main_time = time_ps;
}

extern "C" void litex_sim_init_cmdargs(int argc, char *argv[])
{
	Verilated::commandArgs(argc, argv);
}

extern "C" void litex_sim_init_tracer(void *vsim, long start, long end)
{
	(void)vsim;
	(void)start;
	(void)end;
}

extern "C" void litex_sim_tracer_dump()
{
}

extern "C" int litex_sim_got_finish()
{
	return Verilated::gotFinish();
}

double sc_time_stamp()
{
	return main_time;
}
