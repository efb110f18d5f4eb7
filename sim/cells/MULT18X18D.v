// A simulation model of the ECP5 MULT18X18D in the modes this project's netlists use: an
// 18 x 18 multiplier, signed or unsigned per operand (SIGNEDA, SIGNEDB), with optional input,
// pipeline and output registers clocked by CLK0, enabled by CE0 and cleared by RST0
// synchronously (RESETMODE "SYNC"). yosys ships MULT18X18D as a black box only
// (cells_bb_ecp5.v); nextpnr's and Lattice's documentation give the behaviour modelled here
// (Lattice TN1267, "ECP5 and ECP5-5G sysDSP Usage Guide"). Any other clock, enable, reset or
// mode stops the simulation at time 0 with an error naming the parameter; the shift and cascade
// outputs (SRO*, RO*) and SIGNEDP are not modelled and read 0.
module MULT18X18D(
  A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0, B17, B16, B15,
  B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0, C17, C16, C15, C14, C13, C12,
  C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0, SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK3,
  CLK2, CLK1, CLK0, CE3, CE2, CE1, CE0, RST3, RST2, RST1, RST0, SRIA17, SRIA16, SRIA15, SRIA14,
  SRIA13, SRIA12, SRIA11, SRIA10, SRIA9, SRIA8, SRIA7, SRIA6, SRIA5, SRIA4, SRIA3, SRIA2, SRIA1,
  SRIA0, SRIB17, SRIB16, SRIB15, SRIB14, SRIB13, SRIB12, SRIB11, SRIB10, SRIB9, SRIB8, SRIB7,
  SRIB6, SRIB5, SRIB4, SRIB3, SRIB2, SRIB1, SRIB0, SROA17, SROA16, SROA15, SROA14, SROA13,
  SROA12, SROA11, SROA10, SROA9, SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0,
  SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6,
  SROB5, SROB4, SROB3, SROB2, SROB1, SROB0, ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11,
  ROA10, ROA9, ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0, ROB17, ROB16, ROB15, ROB14,
  ROB13, ROB12, ROB11, ROB10, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0, ROC17,
  ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7, ROC6, ROC5, ROC4, ROC3,
  ROC2, ROC1, ROC0, P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21,
  P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0,
  SIGNEDP
);
  input A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0, B17;
  input B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0, C17, C16;
  input C15, C14, C13, C12, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0, SIGNEDA, SIGNEDB;
  input SOURCEA, SOURCEB, CLK3, CLK2, CLK1, CLK0, CE3, CE2, CE1, CE0, RST3, RST2, RST1, RST0;
  input SRIA17, SRIA16, SRIA15, SRIA14, SRIA13, SRIA12, SRIA11, SRIA10, SRIA9, SRIA8, SRIA7;
  input SRIA6, SRIA5, SRIA4, SRIA3, SRIA2, SRIA1, SRIA0, SRIB17, SRIB16, SRIB15, SRIB14, SRIB13;
  input SRIB12, SRIB11, SRIB10, SRIB9, SRIB8, SRIB7, SRIB6, SRIB5, SRIB4, SRIB3, SRIB2, SRIB1;
  input SRIB0;
  output SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8, SROA7;
  output SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0, SROB17, SROB16, SROB15, SROB14;
  output SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2;
  output SROB1, SROB0, ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9, ROA8, ROA7;
  output ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0, ROB17, ROB16, ROB15, ROB14, ROB13, ROB12;
  output ROB11, ROB10, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0, ROC17, ROC16;
  output ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7, ROC6, ROC5, ROC4, ROC3;
  output ROC2, ROC1, ROC0, P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22;
  output P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3;
  output P2, P1, P0, SIGNEDP;
  parameter REG_INPUTA_CLK = "NONE";
  parameter REG_INPUTA_CE = "CE0";
  parameter REG_INPUTA_RST = "RST0";
  parameter REG_INPUTB_CLK = "NONE";
  parameter REG_INPUTB_CE = "CE0";
  parameter REG_INPUTB_RST = "RST0";
  parameter REG_INPUTC_CLK = "NONE";
  parameter REG_INPUTC_CE = "CE0";
  parameter REG_INPUTC_RST = "RST0";
  parameter REG_PIPELINE_CLK = "NONE";
  parameter REG_PIPELINE_CE = "CE0";
  parameter REG_PIPELINE_RST = "RST0";
  parameter REG_OUTPUT_CLK = "NONE";
  parameter REG_OUTPUT_CE = "CE0";
  parameter REG_OUTPUT_RST = "RST0";
  parameter CLK0_DIV = "ENABLED";
  parameter CLK1_DIV = "ENABLED";
  parameter CLK2_DIV = "ENABLED";
  parameter CLK3_DIV = "ENABLED";
  parameter HIGHSPEED_CLK = "NONE";
  parameter GSR = "ENABLED";
  parameter CAS_MATCH_REG = "FALSE";
  parameter SOURCEB_MODE = "B_SHIFT";
  parameter MULT_BYPASS = "DISABLED";
  parameter RESETMODE = "SYNC";

  wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
  wire [17:0] b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
  reg [17:0] a_reg = 18'd0, b_reg = 18'd0;
  reg signa_reg = 1'b0, signb_reg = 1'b0;
  reg [35:0] pipe_reg = 36'd0, out_reg = 36'd0;

  wire [17:0] a_in = REG_INPUTA_CLK == "CLK0" ? a_reg : a;
  wire [17:0] b_in = REG_INPUTB_CLK == "CLK0" ? b_reg : b;
  wire signa = REG_INPUTA_CLK == "CLK0" ? signa_reg : SIGNEDA;
  wire signb = REG_INPUTB_CLK == "CLK0" ? signb_reg : SIGNEDB;
  // Each operand widened by one bit, its sign or a zero, and multiplied as signed numbers.
  wire signed [37:0] product = $signed({signa & a_in[17], a_in}) *
                               $signed({signb & b_in[17], b_in});
  wire [35:0] piped = REG_PIPELINE_CLK == "CLK0" ? pipe_reg : product[35:0];
  wire [35:0] p = REG_OUTPUT_CLK == "CLK0" ? out_reg : piped;

  always @(posedge CLK0) begin
    if (RST0) begin
      a_reg <= 18'd0; b_reg <= 18'd0; signa_reg <= 1'b0; signb_reg <= 1'b0;
      pipe_reg <= 36'd0; out_reg <= 36'd0;
    end else if (CE0) begin
      a_reg <= a; b_reg <= b; signa_reg <= SIGNEDA; signb_reg <= SIGNEDB;
      pipe_reg <= product[35:0]; out_reg <= piped;
    end
  end

  assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = p;
  assign {SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0} = 18'd0;
  assign {SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0} = 18'd0;
  assign {ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9, ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0} = 18'd0;
  assign {ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0} = 18'd0;
  assign {ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0} = 18'd0;
  assign SIGNEDP = 1'b0;

  initial begin
    if (RESETMODE != "SYNC") $fatal(1, "MULT18X18D model: RESETMODE %s", RESETMODE);
    if (MULT_BYPASS != "DISABLED") $fatal(1, "MULT18X18D model: MULT_BYPASS %s", MULT_BYPASS);
    if (REG_INPUTC_CLK != "NONE") $fatal(1, "MULT18X18D model: REG_INPUTC_CLK %s", REG_INPUTC_CLK);
    if (REG_INPUTA_CLK != "NONE" && (REG_INPUTA_CLK != "CLK0" || REG_INPUTA_CE != "CE0"
        || REG_INPUTA_RST != "RST0")) $fatal(1, "MULT18X18D model: input A register");
    if (REG_INPUTB_CLK != "NONE" && (REG_INPUTB_CLK != "CLK0" || REG_INPUTB_CE != "CE0"
        || REG_INPUTB_RST != "RST0")) $fatal(1, "MULT18X18D model: input B register");
    if (REG_PIPELINE_CLK != "NONE" && (REG_PIPELINE_CLK != "CLK0" || REG_PIPELINE_CE != "CE0"
        || REG_PIPELINE_RST != "RST0")) $fatal(1, "MULT18X18D model: pipeline register");
    if (REG_OUTPUT_CLK != "NONE" && (REG_OUTPUT_CLK != "CLK0" || REG_OUTPUT_CE != "CE0"
        || REG_OUTPUT_RST != "RST0")) $fatal(1, "MULT18X18D model: output register");
  end
endmodule
