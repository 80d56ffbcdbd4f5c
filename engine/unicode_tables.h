/* unicode_tables.h: character-class ranges for the GPT-2 pre-tokenizer, generated from
 * UnicodeData.txt by scripts/dev/gen-unicode-tables.py (see there for the exact definitions). Each
 * table is a sorted list of inclusive [first, last] code point ranges. */
#ifndef IFL_UNICODE_TABLES_H
#define IFL_UNICODE_TABLES_H

#include <stdint.h>

extern const char ifl_unicode_version[];
extern const uint32_t ifl_unicode_letter_ranges[][2];
extern const int ifl_unicode_letter_n;
extern const uint32_t ifl_unicode_number_ranges[][2];
extern const int ifl_unicode_number_n;
extern const uint32_t ifl_unicode_space_ranges[][2];
extern const int ifl_unicode_space_n;

#endif
