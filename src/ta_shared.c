/* libtileattn_shared.so (CMake option TILEATTN_SHARED): the archives' public
 * functions in one shared object, for callers that load the library at run time
 * (the Python package in python/, through ctypes). Nothing is defined here:
 * CMake names every public function undefined at link time (-u), so the linker
 * takes its object from the archives, which are compiled once, position
 * independent, for both. ISO C wants a translation unit to declare something:
 * the header does. */
#include <tileattn.h>
