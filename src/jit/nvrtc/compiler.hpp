// compiler.hpp - generated CUDA source to a cubin with NVRTC, plus what ptxas said about it.
//
// Needs no GPU and no include directories: everything the source includes is passed in memory.
// Each call owns its own NVRTC program, so calls run in parallel and no lock is held while one
// compiles.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tsattn::nvrtc {

// An in-memory #include file; text must outlive the compile_to_cubin call.
struct NvrtcHeader {
  std::string name;  // as written in the #include
  std::string_view text;
};

struct CompileRequest {
  std::string name;  // canonical readable kernel name, for errors, logs and dump file names
  std::string source;
  std::vector<NvrtcHeader> headers;
  std::string arch;                        // "sm_80", "sm_90a": a real architecture, never compute_XX
  std::vector<std::string> extra_options;  // after base_options(arch); must not set the arch
};

// From ptxas --verbose. With several entry functions in one program: the largest register count,
// shared memory and stack frame, and the spill bytes of all functions summed (any spill matters).
struct PtxasReport {
  int registers = -1;  // -1: ptxas reported none
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;
  int shared_bytes = 0;
  std::vector<std::string> serialization_notes;  // each ptxas line with a C75xx code (C7510..C7519 ...)
};

struct CompileResult {
  std::vector<uint8_t> cubin;
  std::string log;
  PtxasReport ptxas;
  double compile_ms = 0;
  std::vector<std::string> options;  // the normalized full option list actually used
};

// Throws tsattn::Error: ErrorKind::value for an invalid arch or option, ErrorKind::runtime when
// NVRTC fails (the message has the kernel name, arch, NVRTC error, full log and a source excerpt
// around every error line). Writes <name>.<arch>.cu and .log to TSATTN_DUMP_DIR when it is set.
CompileResult compile_to_cubin(const CompileRequest& request);

// The NVRTC version kernels are compiled with ("13.0"), as cache keys record it: the loaded NVRTC's,
// or, where none can be loaded, the CUDA version this library was built with, so that a process
// with no NVRTC finds the cubins an NVRTC of that version precompiled.
std::string nvrtc_version();

// --gpu-architecture=<arch>, -std=c++17, --ptxas-options=--verbose, -default-device, and
// -lineinfo when TSATTN_LINEINFO is on. Throws ErrorKind::value for an arch NVRTC cannot target.
std::vector<std::string> base_options(const std::string& arch);

PtxasReport parse_ptxas_report(std::string_view log);

}  // namespace tsattn::nvrtc
