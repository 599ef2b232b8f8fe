#ifndef NEREID_CORE_VERSION_H_
#define NEREID_CORE_VERSION_H_

// The version workers compare at the rendezvous (ranks built from different
// sources must not train together) and `nereid --version` prints.
inline constexpr char kNereidVersion[] = "0.4.0-dev";

#endif  // NEREID_CORE_VERSION_H_
