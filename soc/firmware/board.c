/* The board's start (soc/board.py): LiteDRAM's start-up sequence of the SDR SDRAM, under
 * software control of its DFI, then the controller takes the SDRAM back. The C start-up
 * calls sdram_start before it copies .data into main RAM (the SDRAM), with only the stack
 * (in the SRAM) in use; generated/sdram_phy.h is LiteX's, written for the board's PHY, and
 * its cdelay is LiteX's hw/common.h. */

#include <stdint.h>

#include <generated/csr.h>
#include <generated/sdram_phy.h>

void sdram_start(void);

void sdram_start(void)
{
	init_sequence();
	sdram_dfii_control_write(DFII_CONTROL_SEL);
}
