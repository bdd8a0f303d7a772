// pelab — may a training step read a value back to the host to decide what to compute?
//
// On a GPU every read waits for the device, so a training step reads nothing back between two
// logged steps (docs/cuda.md, "A training step without round trips"): code that would choose on
// the host computes what every choice needs and selects on the device instead. On the CPU a
// tensor is in host memory and a read is a load: choosing on the host is free there and saves the
// other branch's work. set_emulate_device_reads(true) makes the CPU answer as a GPU does, so
// that the CPU runs — and the tests and bench_train's --attention composite count — the path a
// GPU takes.
#pragma once

#include "pelab/dtype.h"

namespace pelab {

// True on the CPU (unless device-like reads are emulated), false on any other device.
bool step_may_read_host(Device device);

// Emulate a device's reads on the CPU (process-wide); returns the previous setting.
bool set_emulate_device_reads(bool on);

// Scoped: emulate device reads, and restore the previous setting.
class EmulateDeviceReads {
 public:
  EmulateDeviceReads() : previous_(set_emulate_device_reads(true)) {}
  ~EmulateDeviceReads() { set_emulate_device_reads(previous_); }
  EmulateDeviceReads(const EmulateDeviceReads&) = delete;
  EmulateDeviceReads& operator=(const EmulateDeviceReads&) = delete;

 private:
  bool previous_;
};

}  // namespace pelab
